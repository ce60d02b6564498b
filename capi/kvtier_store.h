/*
 * kvtier_store.h: the C ABI of libkvtier.so (built by `make build` into
 * bin/libkvtier.so).
 *
 * The mooncake_store_* functions have the names, argument lists and return
 * conventions of Mooncake Store's C API (mooncake-store/include/store_c.h),
 * so a C program written against Mooncake ports by relinking. Negative
 * return values are Mooncake's ErrorCode numbers (MOONCAKE_ERROR_* below).
 * This header is written by hand and is the stable contract; it does not
 * change when the Go code behind it does.
 *
 * Conventions (as in Mooncake's API):
 *   - Every "const char *" argument is read during the call only; the caller
 *     may free it afterwards.
 *   - A NULL store, key or array argument returns -1 (MOONCAKE_ERROR_INTERNAL_ERROR),
 *     as does a handle that was never created or is already destroyed.
 *   - Batch functions return 0 and one result per key in results_out, or -1
 *     when an argument is NULL (results_out is then untouched).
 *
 * kvtier's own rules:
 *   - put_from, batch_put_from, get_into and batch_get_into accept only memory
 *     inside a buffer registered with mooncake_store_register_buffer; any other
 *     range, or a buffer smaller than the object, is
 *     MOONCAKE_ERROR_INVALID_PARAMS (-600) and nothing is read or written.
 *   - A registered buffer must stay valid until unregistered;
 *     mooncake_store_unregister_buffer waits for transfers using it to end.
 *   - A put of a key already stored with the same size returns 0 (keys are
 *     content-derived: the first writer wins).
 *   - The store being full is MOONCAKE_ERROR_NO_AVAILABLE_HANDLE (-200): back
 *     off and retry.
 *   - setup: metadata_server is accepted and ignored (kvtier's master is its
 *     only metadata service); protocol must be "tcp" (or NULL/empty);
 *     device_name is ignored; master_server_addr is the kvtier master's gRPC
 *     address, or several separated by commas (a leader and standbys).
 *   - Every function is safe to call from several threads at once on one
 *     handle. Handles are opaque numbers, never pointers into Go memory.
 */
#ifndef KVTIER_STORE_H
#define KVTIER_STORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *mooncake_store_t;

/* Placement of a put. A NULL config means one replica, no pin. kvtier honours
 * the first preferred segment (it places the first replica there when it has
 * room). */
struct mooncake_replicate_config {
    size_t replica_num;
    int with_soft_pin;
    int with_hard_pin;
    const char **preferred_segments;
    size_t preferred_segments_count;
};
typedef struct mooncake_replicate_config mooncake_replicate_config_t;

/* Return codes: Mooncake's ErrorCode values (mooncake-store/include/types.h).
 * The ones kvtier returns, and the kvtier code each stands for, are listed in
 * capi/codes.go. */
#define MOONCAKE_ERROR_OK                            0
#define MOONCAKE_ERROR_INTERNAL_ERROR               (-1)
#define MOONCAKE_ERROR_SEGMENT_NOT_FOUND            (-101)
#define MOONCAKE_ERROR_SEGMENT_ALREADY_EXISTS       (-102)
#define MOONCAKE_ERROR_CLIENT_NOT_FOUND             (-103)
#define MOONCAKE_ERROR_NO_AVAILABLE_HANDLE          (-200)
#define MOONCAKE_ERROR_INVALID_KEY                  (-400)
#define MOONCAKE_ERROR_INVALID_PARAMS               (-600)
#define MOONCAKE_ERROR_ILLEGAL_CLIENT               (-601)
#define MOONCAKE_ERROR_REPLICA_IS_NOT_READY         (-703)
#define MOONCAKE_ERROR_OBJECT_NOT_FOUND             (-704)
#define MOONCAKE_ERROR_OBJECT_ALREADY_EXISTS        (-705)
#define MOONCAKE_ERROR_OBJECT_HAS_LEASE             (-706)
#define MOONCAKE_ERROR_LEASE_EXPIRED                (-707)
#define MOONCAKE_ERROR_TRANSFER_FAIL                (-800)
#define MOONCAKE_ERROR_CHECKSUM_MISMATCH            (-801)
#define MOONCAKE_ERROR_RPC_FAIL                     (-900)
#define MOONCAKE_ERROR_UNAVAILABLE_IN_CURRENT_STATUS (-1010)
#define MOONCAKE_ERROR_FILE_READ_FAIL               (-1102)
#define MOONCAKE_ERROR_FILE_WRITE_FAIL              (-1103)

/* ---- Lifecycle ---------------------------------------------------------- */

/* Returns a new handle, or NULL. */
mooncake_store_t mooncake_store_create(void);

/* Closes the connection (unmounting any segment this handle serves) and
 * frees the handle. NULL or an unknown handle is ignored. */
void mooncake_store_destroy(mooncake_store_t store);

/* Connects to the master. global_segment_size > 0 also maps that much memory
 * here and mounts it as a MEMORY segment others may be allocated into
 * (reachable at local_hostname, with a free port when it names none);
 * local_buffer_size > 0 keeps a staging buffer. Returns 0 or a negative code;
 * calling it twice on one handle is -600. */
int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
                         const char *metadata_server,
                         uint64_t global_segment_size,
                         uint64_t local_buffer_size, const char *protocol,
                         const char *device_name,
                         const char *master_server_addr);

/* setup with Mooncake's defaults: host "localhost", the master at
 * $KVTIER_MASTER or else 127.0.0.1:50051, mount_segment_size as the global
 * segment size, no staging buffer. */
int mooncake_store_init_all(mooncake_store_t store, const char *protocol,
                            const char *device_name,
                            uint64_t mount_segment_size);

/* 0 when the master answers, else a negative code. */
int mooncake_store_health_check(mooncake_store_t store);

/* ---- Put ---------------------------------------------------------------- */

/* Stores size bytes from value (any memory; copied during the call). */
int mooncake_store_put(mooncake_store_t store, const char *key,
                       const void *value, size_t size,
                       const mooncake_replicate_config_t *config);

/* Stores size bytes straight from a registered buffer. */
int mooncake_store_put_from(mooncake_store_t store, const char *key,
                            void *buffer, size_t size,
                            const mooncake_replicate_config_t *config);

/* One put per key from registered buffers, one master round trip for all;
 * results_out[i] is 0 or a negative code. */
int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys,
                                  void **buffers, const size_t *sizes,
                                  size_t count,
                                  const mooncake_replicate_config_t *config,
                                  int *results_out);

/* ---- Get ---------------------------------------------------------------- */

/* Reads the object into a registered buffer of size bytes (at least the
 * object's size). Returns the object's size or a negative code. */
int64_t mooncake_store_get_into(mooncake_store_t store, const char *key,
                                void *buffer, size_t size);

/* results_out[i] is the size read into buffers[i], or a negative code. */
int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys,
                                  void **buffers, const size_t *sizes,
                                  size_t count, int64_t *results_out);

/* ---- Existence, size, hostname ------------------------------------------ */

/* 1 stored, 0 not stored, negative on error. Never extends a lease. */
int mooncake_store_is_exist(mooncake_store_t store, const char *key);

/* results_out[i] is 1, 0 or a negative code. */
int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys,
                                  size_t count, int *results_out);

/* The object's size, or a negative code (-703 while it is being written). */
int64_t mooncake_store_get_size(mooncake_store_t store, const char *key);

/* Copies this node's transfer address (or local_hostname for a pure caller)
 * with its NUL into buf_out. -1 if buf_len is too small. */
int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out,
                                size_t buf_len);

/* ---- Remove ------------------------------------------------------------- */

/* 0, or -706 while the object is under a read lease (unless force), -704
 * when it is not stored. */
int mooncake_store_remove(mooncake_store_t store, const char *key, int force);

/* Removes every key matching pattern (RE2 syntax); returns how many. */
int64_t mooncake_store_remove_by_regex(mooncake_store_t store,
                                       const char *pattern, int force);

/* Removes every key; returns how many. */
int64_t mooncake_store_remove_all(mooncake_store_t store, int force);

/* ---- Buffer registration ------------------------------------------------ */

/* Makes [buffer, buffer+size) usable by the zero-copy calls. NULL, size 0,
 * or memory this process cannot read and write on the CPU (unmapped, or GPU
 * memory: kvtier moves host memory only) is -600. Registering the same range again is a no-op; another size at an
 * address already registered replaces that registration. */
int mooncake_store_register_buffer(mooncake_store_t store, void *buffer,
                                   size_t size);

/* Forgets the buffer registered at exactly this address, after the transfers
 * using it end. -600 when no buffer starts there. */
int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer);

/* ---- kvtier extensions (not in Mooncake's C API) ------------------------ */

/* batch_put_from for unregistered memory (copied during the call); the
 * Python package's put_batch uses it. */
int kvtier_store_batch_put(mooncake_store_t store, const char **keys,
                           const void **values, const size_t *sizes,
                           size_t count,
                           const mooncake_replicate_config_t *config,
                           int *results_out);

/* Reads the object into memory this call allocates; *out receives it (free
 * it with kvtier_free). Returns the size or a negative code (*out is then
 * NULL). */
int64_t kvtier_store_get_alloc(mooncake_store_t store, const char *key,
                               void **out);

/* get_alloc for each key: outs[i] (free with kvtier_free) and results_out[i]
 * (size or negative code; outs[i] NULL on error). */
int kvtier_store_batch_get_alloc(mooncake_store_t store, const char **keys,
                                 size_t count, void **outs,
                                 int64_t *results_out);

/* One remove per key; results_out[i] is 0 or a negative code. */
int kvtier_store_batch_remove(mooncake_store_t store, const char **keys,
                              size_t count, int force, int *results_out);

/* The tenant this handle's calls carry (quotas and key spaces are per
 * tenant); call before setup. Without it the handle uses the default tenant. */
int kvtier_store_set_tenant(mooncake_store_t store, const char *tenant);

/* Multi-buffer batch put (Mooncake's Python batch_put_from_multi_buffers):
 * key i's value is the concatenation of part_counts[i] registered buffers,
 * taken in order from ptrs/sizes (the parts of key 0, then key 1, ...). A
 * single part is stored without a copy; several are gathered once. */
int kvtier_store_batch_put_multi(mooncake_store_t store, const char **keys,
                                 size_t count, const size_t *part_counts,
                                 void **ptrs, const size_t *sizes,
                                 const mooncake_replicate_config_t *config,
                                 int *results_out);

/* Multi-buffer batch get: key i's object is spread over its parts in order;
 * results_out[i] is its size, or -600 when the parts are not registered or
 * together smaller than the object (nothing written), or another negative
 * code. One part is read into without a copy; several through one copy. */
int kvtier_store_batch_get_multi(mooncake_store_t store, const char **keys,
                                 size_t count, const size_t *part_counts,
                                 void **ptrs, const size_t *sizes,
                                 int64_t *results_out);

/* Frees memory returned by kvtier_store_get_alloc / batch_get_alloc. */
void kvtier_free(void *p);

/* The name of a return code, e.g. "OBJECT_NOT_FOUND" for -704; never NULL. */
const char *kvtier_error_name(int code);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_STORE_H */
