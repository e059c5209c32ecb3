// dsrt_cuda_kernel_table: takes the address of every function of
// dsrt/kernels.h. Linked against libdsrt_cuda.a, a function the cuda
// backend does not define fails the link, and so the build of `check`; run,
// it says how many there are. check_kernel_table.py keeps this table equal
// to the header's declarations.
#include "dsrt/kernels.h"

#include <cstdio>

namespace {

struct Entry {
  const char *name;
  const void *address;
};

#define DSRT_KERNEL(f) Entry{#f, reinterpret_cast<const void *>(&dsrt::f)}
const Entry kTable[] = {
    DSRT_KERNEL(unary),
    DSRT_KERNEL(binary),
    DSRT_KERNEL(compare),
    DSRT_KERNEL(where),
    DSRT_KERNEL(cast),
    DSRT_KERNEL(copy),
    DSRT_KERNEL(matmul),
    DSRT_KERNEL(gemm),
    DSRT_KERNEL(matmul_bias),
    DSRT_KERNEL(matmul_bias_grad),
    DSRT_KERNEL(matmul_bias_gelu),
    DSRT_KERNEL(matmul_dgelu),
    DSRT_KERNEL(matmul_workspace_bytes),
    DSRT_KERNEL(gemm_workspace_bytes),
    DSRT_KERNEL(matmul_bias_grad_workspace_bytes),
    DSRT_KERNEL(matmul_lhs_bias_grad),
    DSRT_KERNEL(matmul_lhs_bias_grad_workspace_bytes),
    DSRT_KERNEL(softmax),
    DSRT_KERNEL(log_softmax),
    DSRT_KERNEL(softmax_workspace_bytes),
    DSRT_KERNEL(layer_norm),
    DSRT_KERNEL(layer_norm_workspace_bytes),
    DSRT_KERNEL(batch_norm),
    DSRT_KERNEL(batch_norm_train),
    DSRT_KERNEL(reduce),
    DSRT_KERNEL(reduce_workspace_bytes),
    DSRT_KERNEL(transpose),
    DSRT_KERNEL(broadcast_to),
    DSRT_KERNEL(concat),
    DSRT_KERNEL(split),
    DSRT_KERNEL(slice),
    DSRT_KERNEL(gather),
    DSRT_KERNEL(scatter),
    DSRT_KERNEL(top_k),
    DSRT_KERNEL(trilu),
    DSRT_KERNEL(dropout),
    DSRT_KERNEL(softmax_cross_entropy),
    DSRT_KERNEL(softmax_cross_entropy_workspace_bytes),
    DSRT_KERNEL(softmax_cross_entropy_with_grad),
    DSRT_KERNEL(softmax_cross_entropy_with_grad_workspace_bytes),
    DSRT_KERNEL(nll_loss),
    DSRT_KERNEL(conv),
    DSRT_KERNEL(conv_workspace_bytes),
    DSRT_KERNEL(conv_grad_input_workspace_bytes),
    DSRT_KERNEL(conv_grad_weight_workspace_bytes),
    DSRT_KERNEL(max_pool),
    DSRT_KERNEL(avg_pool),
    DSRT_KERNEL(adam),
    DSRT_KERNEL(momentum),
    DSRT_KERNEL(adagrad),
    DSRT_KERNEL(softmax_grad),
    DSRT_KERNEL(log_softmax_grad),
    DSRT_KERNEL(softmax_grad_workspace_bytes),
    DSRT_KERNEL(attention),
    DSRT_KERNEL(attention_grad),
    DSRT_KERNEL(attention_grad_workspace_bytes),
    DSRT_KERNEL(attention_grad_cuda_workspace_bytes),
    DSRT_KERNEL(attention_packed),
    DSRT_KERNEL(attention_packed_grad),
    DSRT_KERNEL(layer_norm_grad),
    DSRT_KERNEL(layer_norm_grad_add),
    DSRT_KERNEL(layer_norm_grad_workspace_bytes),
    DSRT_KERNEL(batch_norm_grad),
    DSRT_KERNEL(softmax_cross_entropy_grad),
    DSRT_KERNEL(nll_loss_grad),
    DSRT_KERNEL(gather_grad),
    DSRT_KERNEL(gather_grad_workspace_bytes),
    DSRT_KERNEL(slice_grad),
    DSRT_KERNEL(conv_grad_input),
    DSRT_KERNEL(conv_grad_weight),
    DSRT_KERNEL(max_pool_grad),
    DSRT_KERNEL(avg_pool_grad),
    DSRT_KERNEL(pool_grad_workspace_bytes),
    DSRT_KERNEL(adamw),
    DSRT_KERNEL(adamw_multi),
    DSRT_KERNEL(sgd),
    DSRT_KERNEL(lion),
    DSRT_KERNEL(sum_of_squares)};
#undef DSRT_KERNEL

}  // namespace

int main() {
  int count = 0;
  for (const Entry &e : kTable) {
    if (!e.address) {
      std::fprintf(stderr, "dsrt_cuda_kernel_table: %s has no definition\n", e.name);
      return 1;
    }
    ++count;
  }
  std::printf("dsrt_cuda_kernel_table: all %d functions of dsrt/kernels.h are linked\n", count);
  return 0;
}
