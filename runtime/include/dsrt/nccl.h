// dsrt: the NCCL transport (cuda backend, libdsrt_cuda).
//
// Collectives between GPUs with NCCL, behind the Transport interface
// (transport.h): one NCCL communicator per Communicator, so one per grid
// axis (Grid splits the world per axis). Each is bootstrapped over the MPI
// ring: rank 0 of the group creates an ncclUniqueId and broadcasts it. Every
// operation runs on the transport's own CUDA stream, after the work enqueued
// on the issuing stream (a cudaEvent), and that stream's later work waits
// for it (another cudaEvent); its Request completes when the GPU is done.
// Counters count payload bytes with the ring formulas (comm_volume), as the
// MPI ring does; NCCL sends no header.
#ifndef DSRT_NCCL_H
#define DSRT_NCCL_H

#include "dsrt/comm.h"
#include "dsrt/transport.h"

#include <memory>

namespace dsrt {

// Selects this process's GPU (its local rank's: the launcher's environment,
// else host names compared over `bootstrap`), then creates an NCCL
// communicator over all of `bootstrap`'s ranks. Collective over `bootstrap`
// (the MPI world), which must outlive the transport and every transport
// split from it. Throws a dsrt::Error naming what failed (no device, more
// local ranks than GPUs, an NCCL error).
std::unique_ptr<Transport> make_nccl_world(Communicator &bootstrap);

// The CUDA device make_nccl_world chose (-1 before).
int nccl_device();

}  // namespace dsrt

#endif  // DSRT_NCCL_H
