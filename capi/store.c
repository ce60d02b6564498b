// The public C functions of kvtier_store.h. Each one forwards to a Go export
// (kvtier_go_*, declared in the cgo-generated _cgo_export.h); defining them
// here, against the hand-written header, makes the C compiler check every
// signature of the stable ABI. A handle crosses as a number (uintptr_t): it
// indexes a table on the Go side and never points into Go memory.

#include <stdlib.h>

#include "kvtier_store.h"
#include "_cgo_export.h"

#define H(s) ((uintptr_t)(s))

mooncake_store_t mooncake_store_create(void) {
    return (mooncake_store_t)kvtier_go_create();
}

void mooncake_store_destroy(mooncake_store_t store) {
    kvtier_go_destroy(H(store));
}

int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
                         const char *metadata_server,
                         uint64_t global_segment_size,
                         uint64_t local_buffer_size, const char *protocol,
                         const char *device_name,
                         const char *master_server_addr) {
    return kvtier_go_setup(H(store), (char *)local_hostname,
                           (char *)metadata_server, global_segment_size,
                           local_buffer_size, (char *)protocol,
                           (char *)device_name, (char *)master_server_addr);
}

int mooncake_store_init_all(mooncake_store_t store, const char *protocol,
                            const char *device_name,
                            uint64_t mount_segment_size) {
    return kvtier_go_init_all(H(store), (char *)protocol, (char *)device_name,
                              mount_segment_size);
}

int mooncake_store_health_check(mooncake_store_t store) {
    return kvtier_go_health_check(H(store));
}

int mooncake_store_put(mooncake_store_t store, const char *key,
                       const void *value, size_t size,
                       const mooncake_replicate_config_t *config) {
    return kvtier_go_put(H(store), (char *)key, (void *)value, size,
                         (mooncake_replicate_config_t *)config, 0);
}

int mooncake_store_put_from(mooncake_store_t store, const char *key,
                            void *buffer, size_t size,
                            const mooncake_replicate_config_t *config) {
    return kvtier_go_put(H(store), (char *)key, buffer, size,
                         (mooncake_replicate_config_t *)config, 1);
}

int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys,
                                  void **buffers, const size_t *sizes,
                                  size_t count,
                                  const mooncake_replicate_config_t *config,
                                  int *results_out) {
    return kvtier_go_batch_put(H(store), (char **)keys, buffers,
                               (size_t *)sizes, count,
                               (mooncake_replicate_config_t *)config,
                               results_out, 1);
}

int kvtier_store_batch_put(mooncake_store_t store, const char **keys,
                           const void **values, const size_t *sizes,
                           size_t count,
                           const mooncake_replicate_config_t *config,
                           int *results_out) {
    return kvtier_go_batch_put(H(store), (char **)keys, (void **)values,
                               (size_t *)sizes, count,
                               (mooncake_replicate_config_t *)config,
                               results_out, 0);
}

int64_t mooncake_store_get_into(mooncake_store_t store, const char *key,
                                void *buffer, size_t size) {
    return kvtier_go_get_into(H(store), (char *)key, buffer, size);
}

int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys,
                                  void **buffers, const size_t *sizes,
                                  size_t count, int64_t *results_out) {
    return kvtier_go_batch_get_into(H(store), (char **)keys, buffers,
                                    (size_t *)sizes, count, results_out);
}

int mooncake_store_is_exist(mooncake_store_t store, const char *key) {
    return kvtier_go_is_exist(H(store), (char *)key);
}

int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys,
                                  size_t count, int *results_out) {
    return kvtier_go_batch_is_exist(H(store), (char **)keys, count,
                                    results_out);
}

int64_t mooncake_store_get_size(mooncake_store_t store, const char *key) {
    return kvtier_go_get_size(H(store), (char *)key);
}

int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out,
                                size_t buf_len) {
    return kvtier_go_get_hostname(H(store), buf_out, buf_len);
}

int mooncake_store_remove(mooncake_store_t store, const char *key, int force) {
    return kvtier_go_remove(H(store), (char *)key, force);
}

int64_t mooncake_store_remove_by_regex(mooncake_store_t store,
                                       const char *pattern, int force) {
    return kvtier_go_remove_by_regex(H(store), (char *)pattern, force);
}

int64_t mooncake_store_remove_all(mooncake_store_t store, int force) {
    return kvtier_go_remove_all(H(store), force);
}

int mooncake_store_register_buffer(mooncake_store_t store, void *buffer,
                                   size_t size) {
    return kvtier_go_register_buffer(H(store), buffer, size);
}

int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer) {
    return kvtier_go_unregister_buffer(H(store), buffer);
}

int64_t kvtier_store_get_alloc(mooncake_store_t store, const char *key,
                               void **out) {
    return kvtier_go_get_alloc(H(store), (char *)key, out);
}

int kvtier_store_batch_get_alloc(mooncake_store_t store, const char **keys,
                                 size_t count, void **outs,
                                 int64_t *results_out) {
    return kvtier_go_batch_get_alloc(H(store), (char **)keys, count, outs,
                                     results_out);
}

int kvtier_store_batch_remove(mooncake_store_t store, const char **keys,
                              size_t count, int force, int *results_out) {
    return kvtier_go_batch_remove(H(store), (char **)keys, count, force,
                                  results_out);
}

int kvtier_store_set_tenant(mooncake_store_t store, const char *tenant) {
    return kvtier_go_set_tenant(H(store), (char *)tenant);
}

int kvtier_store_batch_put_multi(mooncake_store_t store, const char **keys,
                                 size_t count, const size_t *part_counts,
                                 void **ptrs, const size_t *sizes,
                                 const mooncake_replicate_config_t *config,
                                 int *results_out) {
    return kvtier_go_batch_put_multi(H(store), (char **)keys, count,
                                     (size_t *)part_counts, ptrs,
                                     (size_t *)sizes,
                                     (mooncake_replicate_config_t *)config,
                                     results_out);
}

int kvtier_store_batch_get_multi(mooncake_store_t store, const char **keys,
                                 size_t count, const size_t *part_counts,
                                 void **ptrs, const size_t *sizes,
                                 int64_t *results_out) {
    return kvtier_go_batch_get_multi(H(store), (char **)keys, count,
                                     (size_t *)part_counts, ptrs,
                                     (size_t *)sizes, results_out);
}

void kvtier_free(void *p) { free(p); }

const char *kvtier_error_name(int code) {
    switch (code) {
    case MOONCAKE_ERROR_OK: return "OK";
    case MOONCAKE_ERROR_INTERNAL_ERROR: return "INTERNAL_ERROR";
    case MOONCAKE_ERROR_SEGMENT_NOT_FOUND: return "SEGMENT_NOT_FOUND";
    case MOONCAKE_ERROR_SEGMENT_ALREADY_EXISTS: return "SEGMENT_ALREADY_EXISTS";
    case MOONCAKE_ERROR_CLIENT_NOT_FOUND: return "CLIENT_NOT_FOUND";
    case MOONCAKE_ERROR_NO_AVAILABLE_HANDLE: return "NO_AVAILABLE_HANDLE";
    case MOONCAKE_ERROR_INVALID_KEY: return "INVALID_KEY";
    case MOONCAKE_ERROR_INVALID_PARAMS: return "INVALID_PARAMS";
    case MOONCAKE_ERROR_ILLEGAL_CLIENT: return "ILLEGAL_CLIENT";
    case MOONCAKE_ERROR_REPLICA_IS_NOT_READY: return "REPLICA_IS_NOT_READY";
    case MOONCAKE_ERROR_OBJECT_NOT_FOUND: return "OBJECT_NOT_FOUND";
    case MOONCAKE_ERROR_OBJECT_ALREADY_EXISTS: return "OBJECT_ALREADY_EXISTS";
    case MOONCAKE_ERROR_OBJECT_HAS_LEASE: return "OBJECT_HAS_LEASE";
    case MOONCAKE_ERROR_LEASE_EXPIRED: return "LEASE_EXPIRED";
    case MOONCAKE_ERROR_TRANSFER_FAIL: return "TRANSFER_FAIL";
    case MOONCAKE_ERROR_CHECKSUM_MISMATCH: return "CHECKSUM_MISMATCH";
    case MOONCAKE_ERROR_RPC_FAIL: return "RPC_FAIL";
    case MOONCAKE_ERROR_UNAVAILABLE_IN_CURRENT_STATUS: return "UNAVAILABLE_IN_CURRENT_STATUS";
    case MOONCAKE_ERROR_FILE_READ_FAIL: return "FILE_READ_FAIL";
    case MOONCAKE_ERROR_FILE_WRITE_FAIL: return "FILE_WRITE_FAIL";
    }
    return "UNKNOWN";
}
