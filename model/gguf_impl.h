/* Private to model/gguf*.c: the layout of an opened GGUF file. */
#ifndef MDL_GGUF_IMPL_H
#define MDL_GGUF_IMPL_H

#include "model/gguf.h"

typedef struct mdl_gguf_kv {
    char *key;               /* NUL-terminated copy (owned) */
    int type;                /* MDL_GGUF_* */
    const uint8_t *val;      /* scalar: the value bytes; string: the u64 length prefix; array: its data */
    int arr_type;            /* arrays: element type */
    uint64_t arr_n;          /* arrays: element count */
    uint64_t *str_off;       /* string arrays: map offset of each element's u64 length prefix (owned) */
    void *copy;              /* numeric arrays whose map placement is misaligned: an aligned copy (owned) */
} mdl_gguf_kv;

typedef struct mdl_gguf_ent {
    const char *s;           /* the key or name */
    int i;                   /* its index in file order */
} mdl_gguf_ent;

struct mdl_gguf {
    char *path;              /* owned copy */
    const uint8_t *map;      /* the whole file, PROT_READ */
    size_t size;             /* file size in bytes */
    int version;
    uint32_t alignment;
    size_t data_off;
    mdl_gguf_id id;          /* recorded at open (fstat of the mapped descriptor, header hash) */
    int n_kv, n_tensors;
    mdl_gguf_kv *kv;         /* n_kv, file order */
    mdl_gguf_ent *kv_sorted; /* n_kv keys sorted (binary search) */
    mdl_gguf_tensor *tensors;/* n_tensors, file order; names are owned copies */
    mdl_gguf_ent *t_sorted;  /* n_tensors names sorted */
};

#endif
