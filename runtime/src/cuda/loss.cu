// loss kernels on the cuda backend.
#include "cuda/common.cuh"

namespace dsrt {

using namespace detail;

void softmax_cross_entropy(Stream &s, const Tensor &scores, const Tensor &labels, const Tensor *weights, const Tensor &loss, const Tensor &log_prob, Reduction reduction, bool has_ignore_index, int64_t ignore_index, const Workspace &ws) {
  begin_kernel(s);
  not_implemented("softmax_cross_entropy");
}

void nll_loss(Stream &s, const Tensor &log_prob, const Tensor &labels, const Tensor *weights, const Tensor &loss, Reduction reduction, bool has_ignore_index, int64_t ignore_index) {
  begin_kernel(s);
  not_implemented("nll_loss");
}

void softmax_cross_entropy_grad(Stream &s, const Tensor &dloss, const Tensor &log_prob, const Tensor &labels, const Tensor *weights, const Tensor &dscores, Reduction reduction, bool has_ignore_index, int64_t ignore_index) {
  begin_kernel(s);
  not_implemented("softmax_cross_entropy_grad");
}

void nll_loss_grad(Stream &s, const Tensor &dloss, const Tensor &labels, const Tensor *weights, const Tensor &dlog_prob, Reduction reduction, bool has_ignore_index, int64_t ignore_index) {
  begin_kernel(s);
  not_implemented("nll_loss_grad");
}

}  // namespace dsrt
