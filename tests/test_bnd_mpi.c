/* The MPI boundary's two halves in one process (transport/boundary.h, BND_MPI), with the wire played by a memcpy
 * between the producer's slot and the consumer's, as the transport actors do around MPI: the producer's stream
 * copies its frame into the slot's host buffer behind ev_tx, the consumer's copies it out and records ev_rx.
 * Steps of several rows travel intact, in order, over K slots; and the process is a world of one without mpirun
 * (the serve loop refuses to run there). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "actors/pp_rank.h"
#include "device/dev.h"
#include "transport/bnd_mpi.h"
#include "transport/boundary.h"

enum { K = 2, ROWS = 8, STEPS = 40 };
#define BYTES ((size_t)ROWS * 64)

static void test_mpi_halves_carry_every_step_intact_and_in_order(void **state)
{
    (void)state;
    dev_err err = {0};
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 2, &err);
    assert_non_null(p);
    dev_device *d0 = dev_platform_device(p, 0), *d1 = dev_platform_device(p, 1);
    bnd_boundary *tx = bnd_create_mpi(d0, 1, K, BYTES, &err), *rx = bnd_create_mpi(d1, 0, K, BYTES, &err);
    assert_non_null(tx);
    assert_non_null(rx);
    assert_int_equal(bnd_transport_kind(tx), BND_MPI);
    assert_int_equal(bnd_slots(rx), K);
    dev_stream *sp = dev_stream_create(d0, "producer", &err), *sc = dev_stream_create(d1, "consumer", &err);
    unsigned char *src = dev_malloc(d0, BYTES, &err), *dst = dev_malloc(d1, BYTES, &err);
    unsigned char *host = dev_host_alloc(p, BYTES, &err), *back = dev_host_alloc(p, BYTES, &err);
    unsigned char *want = malloc(BYTES);
    assert_true(sp && sc && src && dst && host && back && want);
    int delivered = 0;
    for (int t = 0; t < STEPS; t++) {
        const int k = bnd_next_slot(tx, 1);
        for (size_t i = 0; i < BYTES; i++)
            want[i] = (unsigned char)(t * 31 + (int)i);
        memcpy(host, want, BYTES);
        assert_int_equal(dev_copy_h2d_async(sp, src, host, BYTES), 0);
        assert_int_equal(bnd_send_async(tx, k, sp, src, BYTES), 0);
        /* the producer's transport: sends once ev_tx[k] completed (here: waits for it) */
        assert_int_equal(dev_event_sync(bnd_mpi_ev_tx(tx, k), &err), 0);
        memcpy((char *)bnd_mpi_slot(rx, k) + BND_MPI_HDR, (char *)bnd_mpi_slot(tx, k) + BND_MPI_HDR, BYTES);
        /* the consumer: copy slot k out behind the completed receive, then ev_rx[k] frees it */
        assert_int_equal(bnd_recv_async(rx, k, sc, dst, BYTES), 0);
        assert_int_equal(dev_copy_d2h_async(sc, back, dst, BYTES), 0);
        assert_int_equal(dev_event_sync(bnd_mpi_ev_rx(rx, k), &err), 0);
        assert_int_equal(dev_stream_sync(sc, &err), 0);
        assert_memory_equal(back, want, BYTES);
        delivered++;
    }
    assert_int_equal(delivered, STEPS);
    assert_int_equal(bnd_send_async(tx, K, sp, src, BYTES), MEMRA_E_INVAL); /* no slot K */
    assert_int_equal(bnd_recv_async(rx, 0, sc, dst, BYTES + 1), MEMRA_E_INVAL); /* larger than a slot */
    dev_stream_sync(sp, NULL);
    dev_stream_sync(sc, NULL);
    free(want);
    dev_host_free(p, host);
    dev_host_free(p, back);
    dev_free(d0, src);
    dev_free(d1, dst);
    dev_stream_destroy(sp);
    dev_stream_destroy(sc);
    bnd_destroy(tx);
    bnd_destroy(rx);
    dev_platform_close(p);
}

static void test_a_dtod_boundary_has_no_mpi_slots(void **state)
{
    (void)state;
    dev_err err = {0};
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(p);
    bnd_boundary *b = bnd_create(dev_platform_device(p, 0), dev_platform_device(p, 0), K, BYTES, &err);
    assert_non_null(b);
    assert_null(bnd_mpi_slot(b, 0));
    assert_null(bnd_mpi_ev_tx(b, 0));
    bnd_destroy(b);
    assert_null(bnd_create_mpi(dev_platform_device(p, 0), 1, 0, BYTES, &err));
    assert_int_equal(err.code, MEMRA_E_INVAL);
    dev_platform_close(p);
}

static void test_without_mpirun_the_process_is_a_world_of_one(void **state)
{
    (void)state;
    dev_err err = {0};
    unsetenv("OMPI_COMM_WORLD_SIZE");
    assert_int_equal(act_rank_init(NULL, NULL, &err), 0);
    assert_int_equal(act_rank_count(), 1);
    assert_int_equal(act_rank_self(), 0);
    assert_int_equal(act_rank_serve(&err), MEMRA_E_STATE);
    assert_non_null(strstr(err.msg, "ranks > 0"));
    act_rank_finish(0); /* a no-op */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mpi_halves_carry_every_step_intact_and_in_order),
        cmocka_unit_test(test_a_dtod_boundary_has_no_mpi_slots),
        cmocka_unit_test(test_without_mpirun_the_process_is_a_world_of_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
