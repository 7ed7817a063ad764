/* memra_mpi_*: the public face of actors/pp_rank.h (stages in several processes). Main thread only. */
#include "actors/pp_rank.h"
#include "api/api_internal.h"

int memra_mpi_init(int *argc, char ***argv)
{
    dev_err e = {0};
    if (act_rank_init(argc, argv, &e) != 0)
        return api_fail_err(NULL, &e);
    return act_rank_self();
}

int memra_mpi_serve(void)
{
    dev_err e = {0};
    int r = act_rank_serve(&e);
    return r ? api_fail_err(NULL, &e) : MEMRA_OK;
}

void memra_mpi_finish(int status) { act_rank_finish(status); }
