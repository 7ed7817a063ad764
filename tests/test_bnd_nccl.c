/* The NCCL transport's checks that need no GPU (transport/bnd_nccl.h): in a build with NCCL, an id from
 * bnd_nccl_unique_id passes every check up to the device's (a CPU device is then refused), while foreign,
 * damaged and other-version ids and bad ranks or slots are refused with a message naming the cause; in a build
 * without NCCL every call says the build lacks it. The transfers themselves are tests/gpu_nccl.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "device/dev.h"
#include "transport/bnd_nccl.h"

static void expect(bnd_nccl *b, const dev_err *err, int code, const char *needle)
{
    assert_null(b);
    if (err->code != code || !strstr(err->msg, needle))
        fail_msg("expected %s with \"%s\", got %d: \"%s\"", memra_status_str(code), needle, err->code, err->msg);
}

/* The id's checksum as bnd_nccl.c computes it (FNV-1a of the version, xor FNV-1a of NCCL's 128 bytes), so
 * the test can forge a well-formed id with another version. */
static uint32_t fnv1a(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_ids_ranks_and_slots_are_checked_before_the_device(void **st)
{
    if (!bnd_nccl_built())
        skip();
    dev_err err = {0, ""};
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(p);
    dev_device *cpu = dev_platform_device(p, 0);
    uint8_t id[BND_NCCL_ID_BYTES], bad[BND_NCCL_ID_BYTES];
    assert_int_equal(bnd_nccl_unique_id(id, &err), 0);
    assert_memory_equal(id, "memraNC1", 8);

    dev_err e[8] = {{0, ""}};
    /* a good id passes every check before the device's: reaching that refusal is the liveness proof */
    expect(bnd_nccl_create(cpu, id, 0, 1, 2, 64, &e[0]), &e[0], MEMRA_E_UNSUPPORTED, "cpu:0 is not a CUDA device");
    for (int i = 0; i < BND_NCCL_ID_BYTES; i++)
        bad[i] = (uint8_t)(i * 37 + 11);
    expect(bnd_nccl_create(cpu, bad, 0, 1, 2, 64, &e[1]), &e[1], MEMRA_E_INVAL, "not made by bnd_nccl_unique_id");
    memcpy(bad, id, sizeof id);
    bad[100] ^= 1;
    expect(bnd_nccl_create(cpu, bad, 0, 1, 2, 64, &e[2]), &e[2], MEMRA_E_INVAL, "checksum does not match");
    memcpy(bad, id, sizeof id);
    put32(bad + 8, 22001); /* NCCL 2.20.1, checksum made to match */
    put32(bad + 12, fnv1a(bad + 8, 4) ^ fnv1a(bad + 16, 128));
    expect(bnd_nccl_create(cpu, bad, 0, 1, 2, 64, &e[3]), &e[3], MEMRA_E_INVAL, "made by NCCL 2.20.1");
    expect(bnd_nccl_create(cpu, id, 1, 1, 2, 64, &e[4]), &e[4], MEMRA_E_INVAL, "a pair's ranks are 0 and 1");
    expect(bnd_nccl_create(cpu, id, 0, 2, 2, 64, &e[5]), &e[5], MEMRA_E_INVAL, "a pair's ranks are 0 and 1");
    expect(bnd_nccl_create(cpu, id, 0, 1, 0, 64, &e[6]), &e[6], MEMRA_E_INVAL, "need >= 1 slot");
    expect(bnd_nccl_create(cpu, id, 0, 1, 2, 0, &e[7]), &e[7], MEMRA_E_INVAL, "> 0 bytes");
    int v = 0;
    assert_int_equal(bnd_nccl_version(&v, &err), 0);
    assert_true(v >= 20000);
    dev_platform_close(p);
}

static void test_a_build_without_nccl_says_so(void **st)
{
    if (bnd_nccl_built())
        skip();
    uint8_t id[BND_NCCL_ID_BYTES] = {0};
    dev_err e1 = {0, ""}, e2 = {0, ""}, e3 = {0, ""};
    assert_int_equal(bnd_nccl_unique_id(id, &e1), MEMRA_E_UNSUPPORTED);
    assert_non_null(strstr(e1.msg, "this build has no NCCL"));
    expect(bnd_nccl_create(NULL, id, 0, 1, 2, 64, &e2), &e2, MEMRA_E_UNSUPPORTED, "this build has no NCCL");
    assert_int_equal(bnd_nccl_send_async(NULL, 0, NULL, NULL, 0, &e3), MEMRA_E_UNSUPPORTED);
    assert_non_null(strstr(e3.msg, "bnd_nccl_send_async: this build has no NCCL"));
}

int main(void)
{
    printf("NCCL in this build: %s\n", bnd_nccl_built() ? "yes" : "no");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_ranks_and_slots_are_checked_before_the_device),
        cmocka_unit_test(test_a_build_without_nccl_says_so),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
