// A C program that drives libkvtier.so through kvtier_store.h the way a
// Mooncake C caller would. Usage: store_test MASTER_ADDR. It prints one
// "ok NAME" line per check and "PASS" at the end, or "FAIL ..." and exits 1.
// capi/capi_test.go builds it with gcc against the library, runs it against
// a real `kvtier standalone` and checks its output.

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier_store.h"

static int failures;

#define CHECK(name, cond)                                                  \
    do {                                                                   \
        if (cond) {                                                        \
            printf("ok %s\n", name);                                       \
        } else {                                                           \
            printf("FAIL %s (%s:%d: %s)\n", name, __FILE__, __LINE__, #cond); \
            failures++;                                                    \
        }                                                                  \
    } while (0)

#define EQ(name, got, want)                                                \
    do {                                                                   \
        long long g_ = (long long)(got), w_ = (long long)(want);           \
        if (g_ == w_) {                                                    \
            printf("ok %s\n", name);                                       \
        } else {                                                           \
            printf("FAIL %s: got %lld (%s), want %lld (%s)\n", name, g_,   \
                   kvtier_error_name((int)g_), w_, kvtier_error_name((int)w_)); \
            failures++;                                                    \
        }                                                                  \
    } while (0)

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 131 + i * 7);
}

struct worker {
    mooncake_store_t store;
    int id;
    int errors;
};

// Each thread puts and reads back its own keys through registered buffers.
static void *work(void *arg) {
    struct worker *w = arg;
    enum { N = 40, SZ = 64 * 1024 };
    unsigned char *src = malloc(SZ), *dst = malloc(SZ);
    if (mooncake_store_register_buffer(w->store, src, SZ) != 0 ||
        mooncake_store_register_buffer(w->store, dst, SZ) != 0) {
        w->errors++;
        return NULL;
    }
    for (int i = 0; i < N; i++) {
        char key[64];
        snprintf(key, sizeof key, "c/thread-%d/block-%d", w->id, i);
        fill(src, SZ, (unsigned)(w->id * 1000 + i));
        if (mooncake_store_put_from(w->store, key, src, SZ, NULL) != 0) w->errors++;
        memset(dst, 0, SZ);
        if (mooncake_store_get_into(w->store, key, dst, SZ) != SZ) w->errors++;
        if (memcmp(src, dst, SZ) != 0) w->errors++;
    }
    mooncake_store_unregister_buffer(w->store, src);
    mooncake_store_unregister_buffer(w->store, dst);
    free(src);
    free(dst);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MASTER_ADDR\n", argv[0]);
        return 2;
    }
    const char *master = argv[1];

    // Lifecycle and bad handles.
    mooncake_store_t bogus = (mooncake_store_t)(uintptr_t)12345;
    EQ("null_handle", mooncake_store_is_exist(NULL, "k"), MOONCAKE_ERROR_INTERNAL_ERROR);
    EQ("unknown_handle", mooncake_store_is_exist(bogus, "k"), MOONCAKE_ERROR_INTERNAL_ERROR);
    mooncake_store_destroy(bogus);  // ignored, no crash

    mooncake_store_t store = mooncake_store_create();
    CHECK("create", store != NULL);
    EQ("before_setup", mooncake_store_put(store, "k", "v", 1, NULL), MOONCAKE_ERROR_INVALID_PARAMS);
    EQ("setup_unknown_protocol_refused",
       mooncake_store_setup(store, "localhost", "P2PHANDSHAKE", 0, 0, "efa", "mlx5_0", master),
       MOONCAKE_ERROR_INVALID_PARAMS);
    EQ("setup", mooncake_store_setup(store, "localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master), 0);
    EQ("setup_twice", mooncake_store_setup(store, "localhost", "", 0, 0, "tcp", "", master),
       MOONCAKE_ERROR_INVALID_PARAMS);
    EQ("health_check", mooncake_store_health_check(store), 0);

    char host[256];
    EQ("get_hostname", mooncake_store_get_hostname(store, host, sizeof host), 0);
    CHECK("hostname_value", strcmp(host, "localhost") == 0);
    EQ("get_hostname_small", mooncake_store_get_hostname(store, host, 3), MOONCAKE_ERROR_INTERNAL_ERROR);

    // Plain put of unregistered memory, size, existence.
    const char *hello = "hello from C";
    EQ("put", mooncake_store_put(store, "c/hello", hello, strlen(hello), NULL), 0);
    EQ("put_again_same_size", mooncake_store_put(store, "c/hello", hello, strlen(hello), NULL), 0);
    EQ("get_size", mooncake_store_get_size(store, "c/hello"), (long long)strlen(hello));
    EQ("get_size_missing", mooncake_store_get_size(store, "c/missing"), MOONCAKE_ERROR_OBJECT_NOT_FOUND);
    EQ("is_exist", mooncake_store_is_exist(store, "c/hello"), 1);
    EQ("is_exist_missing", mooncake_store_is_exist(store, "c/missing"), 0);

    // Zero-copy paths only take registered memory.
    enum { BLK = 1 << 20 };
    unsigned char *src = malloc(4 * BLK), *dst = malloc(4 * BLK);
    fill(src, 4 * BLK, 7);
    EQ("put_from_unregistered", mooncake_store_put_from(store, "c/blk0", src, BLK, NULL), MOONCAKE_ERROR_INVALID_PARAMS);
    EQ("register_null", mooncake_store_register_buffer(store, NULL, 10), MOONCAKE_ERROR_INVALID_PARAMS);
    EQ("register_src", mooncake_store_register_buffer(store, src, 4 * BLK), 0);
    EQ("register_src_again", mooncake_store_register_buffer(store, src, 4 * BLK), 0);
    EQ("register_dst", mooncake_store_register_buffer(store, dst, 4 * BLK), 0);
    EQ("put_from", mooncake_store_put_from(store, "c/blk0", src, BLK, NULL), 0);
    EQ("put_from_past_end", mooncake_store_put_from(store, "c/blkX", src + BLK, 4 * BLK, NULL),
       MOONCAKE_ERROR_INVALID_PARAMS);
    unsigned char *loose = malloc(BLK);
    EQ("get_into_unregistered", mooncake_store_get_into(store, "c/blk0", loose, BLK), MOONCAKE_ERROR_INVALID_PARAMS);
    free(loose);
    EQ("get_into_too_small", mooncake_store_get_into(store, "c/blk0", dst, BLK - 1), MOONCAKE_ERROR_INVALID_PARAMS);
    EQ("get_into", mooncake_store_get_into(store, "c/blk0", dst, 2 * BLK), BLK);
    CHECK("get_into_bytes", memcmp(src, dst, BLK) == 0);
    EQ("get_into_missing", mooncake_store_get_into(store, "c/missing", dst, BLK), MOONCAKE_ERROR_OBJECT_NOT_FOUND);

    // Replicate config.
    mooncake_replicate_config_t cfg = {.replica_num = 1, .with_soft_pin = 1};
    EQ("put_with_config", mooncake_store_put_from(store, "c/pinned", src, 4096, &cfg), 0);
    mooncake_replicate_config_t badcfg = {.replica_num = 1, .preferred_segments = NULL, .preferred_segments_count = 1};
    EQ("put_bad_config", mooncake_store_put_from(store, "c/badcfg", src, 4096, &badcfg), MOONCAKE_ERROR_INVALID_PARAMS);

    // Batches: existence first, then put what is missing, per-key results.
    const char *keys[4] = {"c/batch/0", "c/batch/1", "c/batch/2", "c/blk0"};
    void *bufs[4] = {src, src + BLK, malloc(16), src};
    size_t sizes[4] = {BLK, BLK, 16, BLK};
    int ex[4];
    EQ("batch_is_exist", mooncake_store_batch_is_exist(store, keys, 4, ex), 0);
    CHECK("batch_is_exist_values", ex[0] == 0 && ex[1] == 0 && ex[2] == 0 && ex[3] == 1);
    int pr[4];
    EQ("batch_put_from", mooncake_store_batch_put_from(store, keys, bufs, sizes, 4, NULL, pr), 0);
    EQ("batch_put_from_0", pr[0], 0);
    EQ("batch_put_from_1", pr[1], 0);
    EQ("batch_put_from_unregistered", pr[2], MOONCAKE_ERROR_INVALID_PARAMS);
    EQ("batch_put_from_existing", pr[3], 0);
    EQ("batch_put_from_null", mooncake_store_batch_put_from(store, NULL, bufs, sizes, 4, NULL, pr),
       MOONCAKE_ERROR_INTERNAL_ERROR);
    free(bufs[2]);

    const char *gkeys[3] = {"c/batch/0", "c/batch/1", "c/batch/missing"};
    void *gbufs[3] = {dst, dst + BLK, dst + 2 * BLK};
    size_t gsizes[3] = {BLK, BLK, BLK};
    int64_t gr[3];
    memset(dst, 0, 4 * BLK);
    EQ("batch_get_into", mooncake_store_batch_get_into(store, gkeys, gbufs, gsizes, 3, gr), 0);
    EQ("batch_get_into_0", gr[0], BLK);
    EQ("batch_get_into_1", gr[1], BLK);
    EQ("batch_get_into_missing", gr[2], MOONCAKE_ERROR_OBJECT_NOT_FOUND);
    CHECK("batch_get_into_bytes", memcmp(src, dst, 2 * BLK) == 0);

    // kvtier extensions: unregistered batch put, reads into memory the
    // library allocates, multi-buffer batches, batch remove.
    const char *xkeys[2] = {"c/ext/0", "c/ext/1"};
    const void *xvals[2] = {"first value", "second"};
    size_t xsizes[2] = {11, 6};
    int xr[2];
    EQ("kvtier_batch_put", kvtier_store_batch_put(store, xkeys, xvals, xsizes, 2, NULL, xr), 0);
    CHECK("kvtier_batch_put_results", xr[0] == 0 && xr[1] == 0);
    void *got = NULL;
    EQ("kvtier_get_alloc", kvtier_store_get_alloc(store, "c/ext/0", &got), 11);
    CHECK("kvtier_get_alloc_bytes", got != NULL && memcmp(got, "first value", 11) == 0);
    kvtier_free(got);
    EQ("kvtier_get_alloc_missing", kvtier_store_get_alloc(store, "c/ext/none", &got), MOONCAKE_ERROR_OBJECT_NOT_FOUND);
    CHECK("kvtier_get_alloc_missing_null", got == NULL);
    void *outs[2];
    int64_t ar[2];
    const char *akeys[2] = {"c/ext/1", "c/ext/none"};
    EQ("kvtier_batch_get_alloc", kvtier_store_batch_get_alloc(store, akeys, 2, outs, ar), 0);
    CHECK("kvtier_batch_get_alloc_results", ar[0] == 6 && memcmp(outs[0], "second", 6) == 0 &&
          ar[1] == MOONCAKE_ERROR_OBJECT_NOT_FOUND && outs[1] == NULL);
    kvtier_free(outs[0]);
    // One key from three registered parts, read back into two.
    const char *mkeys[1] = {"c/ext/multi"};
    size_t mcounts[1] = {3};
    void *mptrs[3] = {src, src + 3 * BLK, src + 100};
    size_t msizes[3] = {1000, 2000, 3000};
    int mr[1];
    EQ("kvtier_batch_put_multi", kvtier_store_batch_put_multi(store, mkeys, 1, mcounts, mptrs, msizes, NULL, mr), 0);
    EQ("kvtier_batch_put_multi_0", mr[0], 0);
    memset(dst, 0, 8192);
    size_t gcounts[1] = {2};
    void *gptrs[2] = {dst, dst + 4096};
    size_t gsz[2] = {4096, 4096};
    int64_t mgr[1];
    EQ("kvtier_batch_get_multi", kvtier_store_batch_get_multi(store, mkeys, 1, gcounts, gptrs, gsz, mgr), 0);
    EQ("kvtier_batch_get_multi_0", mgr[0], 6000);
    CHECK("kvtier_batch_get_multi_bytes", memcmp(dst, src, 1000) == 0 && memcmp(dst + 1000, src + 3 * BLK, 2000) == 0 &&
          memcmp(dst + 3000, src + 100, 1096) == 0 && memcmp(dst + 4096, src + 100 + 1096, 1904) == 0);
    size_t small[2] = {1000, 1000};
    EQ("kvtier_batch_get_multi_small", kvtier_store_batch_get_multi(store, mkeys, 1, gcounts, gptrs, small, mgr), 0);
    EQ("kvtier_batch_get_multi_small_0", mgr[0], MOONCAKE_ERROR_INVALID_PARAMS);
    const char *rkeys[3] = {"c/ext/0", "c/ext/1", "c/ext/none"};
    int rr[3];
    EQ("kvtier_batch_remove", kvtier_store_batch_remove(store, rkeys, 3, 1, rr), 0);
    CHECK("kvtier_batch_remove_results", rr[0] == 0 && rr[1] == 0 && rr[2] == MOONCAKE_ERROR_OBJECT_NOT_FOUND);
    EQ("kvtier_set_tenant_after_setup", kvtier_store_set_tenant(store, "other"), MOONCAKE_ERROR_INVALID_PARAMS);
    CHECK("error_name", strcmp(kvtier_error_name(-706), "OBJECT_HAS_LEASE") == 0);

    // Many threads on one handle.
    enum { T = 4 };
    pthread_t th[T];
    struct worker ws[T];
    for (int i = 0; i < T; i++) {
        ws[i] = (struct worker){.store = store, .id = i};
        pthread_create(&th[i], NULL, work, &ws[i]);
    }
    int terr = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        terr += ws[i].errors;
    }
    EQ("threads", terr, 0);

    // Removal: a fresh read lease refuses remove without force.
    EQ("get_into_for_lease", mooncake_store_get_into(store, "c/batch/0", dst, BLK), BLK);
    EQ("remove_leased", mooncake_store_remove(store, "c/batch/0", 0), MOONCAKE_ERROR_OBJECT_HAS_LEASE);
    EQ("remove_force", mooncake_store_remove(store, "c/batch/0", 1), 0);
    EQ("remove_missing", mooncake_store_remove(store, "c/batch/0", 1), MOONCAKE_ERROR_OBJECT_NOT_FOUND);
    EQ("remove_by_regex", mooncake_store_remove_by_regex(store, "^c/thread-0/", 1), 40);
    EQ("remove_by_regex_bad", mooncake_store_remove_by_regex(store, "([", 1), MOONCAKE_ERROR_INVALID_PARAMS);
    int64_t all = mooncake_store_remove_all(store, 1);
    CHECK("remove_all", all >= 3 * 40 + 5);
    EQ("is_exist_after_remove_all", mooncake_store_is_exist(store, "c/hello"), 0);

    EQ("unregister", mooncake_store_unregister_buffer(store, src), 0);
    EQ("unregister_twice", mooncake_store_unregister_buffer(store, src), MOONCAKE_ERROR_INVALID_PARAMS);
    EQ("put_from_after_unregister", mooncake_store_put_from(store, "c/late", src, BLK, NULL),
       MOONCAKE_ERROR_INVALID_PARAMS);
    mooncake_store_unregister_buffer(store, dst);

    mooncake_store_destroy(store);
    EQ("after_destroy", mooncake_store_is_exist(store, "c/hello"), MOONCAKE_ERROR_INTERNAL_ERROR);
    free(src);
    free(dst);

    if (failures) {
        printf("FAIL %d checks\n", failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
