/* Stages in separate processes: `mpirun -np P memra-run ...` puts stage s on rank owner(s) (one stage per rank by
 * default, consecutive stages per rank when MEMRA_PP_STAGES > P). Rank 0 runs the tool: the API, the submitter or
 * scheduler, its stages and the readback; every other rank runs act_rank_serve, which builds the same runtime
 * from rank 0's configuration whenever rank 0 creates one and serves its stages until rank 0 destroys it.
 * A build without MPI, or a process started without mpirun, is a world of one and none of this runs.
 *
 * A tool's main:
 *   if (act_rank_init(&argc, &argv, &err) != 0) -> print, exit 2
 *   if (act_rank_self() > 0) { int r = act_rank_serve(&err); print err if r; act_rank_finish(r); return r ? 2 : 0; }
 *   ... the tool's work on rank 0 ...
 *   act_rank_finish(status);
 * Threads: act_rank_* on the main thread only. */
#ifndef ACT_PP_RANK_H
#define ACT_PP_RANK_H

#include "device/err.h"

/* MPI when launched by mpirun (transport/bnd_mpi.h). 0 or the error. */
int act_rank_init(int *argc, char ***argv, dev_err *err);
int act_rank_self(void);  /* this process's rank; 0 without MPI */
int act_rank_count(void); /* ranks; 1 without MPI */
/* Ranks > 0: open the platform (MEMRA_BACKEND, as rank 0), then create, serve and destroy runtimes as rank 0
 * asks, until rank 0's act_rank_finish. A runtime whose model file differs from rank 0's (size or header
 * checksum) is refused with a message (rank 0's act_pp_create returns it too). Returns 0 when rank 0 finished
 * well, rank 0's status when it finished failing, or this rank's error (a dead or silent peer, a failed stage). */
int act_rank_serve(dev_err *err);
/* End: rank 0 tells every rank to leave its serve loop with `status`; then MPI_Finalize (status 0) or MPI_Abort
 * (the others may be stuck or dead). No-op without MPI. */
void act_rank_finish(int status);

#endif
