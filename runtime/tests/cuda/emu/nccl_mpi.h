// NCCL's calls over MPI for the CUDA emulation (nccl_mpi.cpp): what the
// fake runtime's ncclXxx functions call when it is built with
// DSRT_FAKE_EMULATE and MPI (DSRT_FAKE_NCCL_MPI).
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <cstddef>

namespace dsemu {
namespace nccl {

struct Comm {
  int nranks, rank;
  MPI_Comm mpi;  // the same ranks in the same order (MPI_COMM_NULL for one rank)
};

void unique_id(char *internal);
Comm *init(int nranks, const char *internal, int rank);
void destroy(Comm *comm);
void group_start();
void group_end();
void all_reduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                Comm *comm);
void reduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
            int root, Comm *comm);
void reduce_scatter(const void *send, void *recv, size_t recvcount, ncclDataType_t type,
                    ncclRedOp_t op, Comm *comm);
void all_gather(const void *send, void *recv, size_t sendcount, ncclDataType_t type, Comm *comm);
void broadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
               Comm *comm);
void send(const void *buf, size_t count, ncclDataType_t type, int peer, Comm *comm);
void recv(void *buf, size_t count, ncclDataType_t type, int peer, Comm *comm);

}  // namespace nccl
}  // namespace dsemu
