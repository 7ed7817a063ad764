/* The MPI wire (bnd_mpi.h). Shared state: the rank and size below, written once by bnd_mpi_init on the main thread
 * before any other thread exists that reads them. Every MPI call is serialized by the callers (bnd_mpi.h). */
#include "transport/bnd_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = 0, g_size = 1, g_on = 0;

/* The world size the launcher announces (Open MPI's mpirun, or a PMI launcher: MPICH's, Slurm's), NULL when the
 * process was not started by one. */
static const char *launch_size(void)
{
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    return ws ? ws : getenv("PMI_SIZE");
}

int bnd_mpi_rank(void) { return g_rank; }
int bnd_mpi_size(void) { return g_size; }

#ifdef MEMRA_HAVE_MPI
#include <mpi.h>

struct bnd_mpi_req {
    MPI_Request r;
};

/* MPI's own words for a failed call, after ours. */
static int mpi_fail(dev_err *err, int rc, const char *call, int peer)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS)
        strcpy(s, "unknown MPI error");
    return dev_err_set(err, MEMRA_E_DEVICE, "rank %d: %s with rank %d failed: %s (a peer died or the network "
                       "failed)", g_rank, call, peer, s);
}

int bnd_mpi_init(int *argc, char ***argv, dev_err *err)
{
    const char *ws = launch_size();
    if (!ws || atoi(ws) <= 1) /* not launched by mpirun, or alone: a world of one */
        return 0;
    int provided = 0, rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS)
        return dev_err_set(err, MEMRA_E_DEVICE, "MPI_Init_thread failed (code %d)", rc);
    g_on = 1;
    if (provided < MPI_THREAD_SERIALIZED)
        return dev_err_set(err, MEMRA_E_DEVICE, "MPI gives thread level %d, the transport needs "
                           "MPI_THREAD_SERIALIZED (%d): one thread at a time, not only the main one", provided,
                           MPI_THREAD_SERIALIZED);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    return 0;
}

void bnd_mpi_finish(int status)
{
    if (!g_on)
        return;
    g_on = 0;
    fflush(NULL); /* MPI_Abort ends the process without flushing stdio: what the tool printed must get out */
    if (status != 0)
        MPI_Abort(MPI_COMM_WORLD, status > 0 ? status : 1);
    else
        MPI_Finalize();
}

int bnd_mpi_isend(int to, int tag, const void *buf, size_t bytes, bnd_mpi_req **req, dev_err *err)
{
    bnd_mpi_req *q = malloc(sizeof *q);
    if (!q)
        return dev_err_set(err, MEMRA_E_NOMEM, "MPI send: out of host memory");
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, to, tag, MPI_COMM_WORLD, &q->r);
    if (rc != MPI_SUCCESS) {
        free(q);
        return mpi_fail(err, rc, "MPI_Isend", to);
    }
    *req = q;
    return 0;
}

int bnd_mpi_irecv(int from, int tag, void *buf, size_t cap, bnd_mpi_req **req, dev_err *err)
{
    bnd_mpi_req *q = malloc(sizeof *q);
    if (!q)
        return dev_err_set(err, MEMRA_E_NOMEM, "MPI receive: out of host memory");
    int rc = MPI_Irecv(buf, (int)cap, MPI_BYTE, from, tag, MPI_COMM_WORLD, &q->r);
    if (rc != MPI_SUCCESS) {
        free(q);
        return mpi_fail(err, rc, "MPI_Irecv", from);
    }
    *req = q;
    return 0;
}

int bnd_mpi_test(bnd_mpi_req *req, int *done, dev_err *err)
{
    int flag = 0, rc = MPI_Test(&req->r, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "MPI_Test", -1);
    *done = flag;
    if (flag)
        free(req);
    return 0;
}

void bnd_mpi_req_free(bnd_mpi_req *req)
{
    if (!req)
        return;
    MPI_Request_free(&req->r);
    free(req);
}

int bnd_mpi_send(int to, int tag, const void *buf, size_t bytes, dev_err *err)
{
    int rc = MPI_Send(buf, (int)bytes, MPI_BYTE, to, tag, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, rc, "MPI_Send", to);
}

int bnd_mpi_probe(int from, int tag, int *src, size_t *bytes, dev_err *err)
{
    int flag = 0, n = 0;
    MPI_Status st;
    int rc = MPI_Iprobe(from < 0 ? MPI_ANY_SOURCE : from, tag, MPI_COMM_WORLD, &flag, &st);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "MPI_Iprobe", from);
    if (!flag)
        return 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    if (src)
        *src = st.MPI_SOURCE;
    if (bytes)
        *bytes = (size_t)n;
    return 1;
}

int bnd_mpi_recv(int from, int tag, void *buf, size_t cap, dev_err *err)
{
    int rc = MPI_Recv(buf, (int)cap, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, rc, "MPI_Recv", from);
}

#else /* built without MPI: a world of one */

struct bnd_mpi_req {
    int unused;
};

static int no_mpi(dev_err *err)
{
    return dev_err_set(err, MEMRA_E_UNSUPPORTED, "this build has no MPI (configure with -DMEMRA_MPI=ON and Open MPI's "
                       "libopenmpi-dev installed)");
}

int bnd_mpi_init(int *argc, char ***argv, dev_err *err)
{
    (void)argc, (void)argv;
    const char *ws = launch_size();
    if (ws && atoi(ws) > 1)
        return dev_err_set(err, MEMRA_E_UNSUPPORTED, "launched by mpirun with %s ranks, but this build has no MPI "
                           "(configure with -DMEMRA_MPI=ON and libopenmpi-dev installed)", ws);
    (void)g_on;
    return 0;
}
void bnd_mpi_finish(int status) { (void)status; }
int bnd_mpi_isend(int to, int tag, const void *buf, size_t bytes, bnd_mpi_req **req, dev_err *err)
{
    (void)to, (void)tag, (void)buf, (void)bytes, (void)req;
    return no_mpi(err);
}
int bnd_mpi_irecv(int from, int tag, void *buf, size_t cap, bnd_mpi_req **req, dev_err *err)
{
    (void)from, (void)tag, (void)buf, (void)cap, (void)req;
    return no_mpi(err);
}
int bnd_mpi_test(bnd_mpi_req *req, int *done, dev_err *err)
{
    (void)req, (void)done;
    return no_mpi(err);
}
void bnd_mpi_req_free(bnd_mpi_req *req) { (void)req; }
int bnd_mpi_send(int to, int tag, const void *buf, size_t bytes, dev_err *err)
{
    (void)to, (void)tag, (void)buf, (void)bytes;
    return no_mpi(err);
}
int bnd_mpi_probe(int from, int tag, int *src, size_t *bytes, dev_err *err)
{
    (void)from, (void)tag, (void)src, (void)bytes;
    return no_mpi(err);
}
int bnd_mpi_recv(int from, int tag, void *buf, size_t cap, dev_err *err)
{
    (void)from, (void)tag, (void)buf, (void)cap;
    return no_mpi(err);
}
#endif
