// Small device helpers around CuTe's WGMMA: issuing a whole tile product,
// viewing an accumulator as (row, col), reusing an accumulator as an A operand
// and converting fragments between number types.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

namespace flashcore::sm90 {

using namespace cute;

// Issues C (+)= A·B over the whole K extent of the fragments as one batch of
// wgmma instructions. kWait >= 0 waits until at most kWait batches are still in
// flight; kWait < 0 returns immediately (the caller waits later).
template <bool kZeroInit, int kWait, class TiledMma, class TA, class TB, class TC>
CUTE_DEVICE void wgmma_tile(TiledMma& tiled_mma, TA const& tCrA, TB const& tCrB, TC& tCrC) {
  constexpr bool kIsRS = !cute::is_base_of<GMMA::DescriptorIterator, typename TiledMma::FrgTypeA>::value;
  if constexpr (kIsRS) warpgroup_fence_operand(const_cast<TA&>(tCrA));
  warpgroup_fence_operand(tCrC);
  warpgroup_arrive();
  if constexpr (kZeroInit) tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTLASS_PRAGMA_UNROLL
  for (int k = 0; k < size<2>(tCrA); ++k) {
    cute::gemm(tiled_mma, tCrA(_, _, k), tCrB(_, _, k), tCrC);
    tiled_mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) warpgroup_wait<kWait>();
  warpgroup_fence_operand(tCrC);
  if constexpr (kIsRS) warpgroup_fence_operand(const_cast<TA&>(tCrA));
}

// Ends the current basic block, which ptxas's instruction scheduler does not
// cross: work placed before it stays before what follows, such as a
// warpgroup_wait that the scheduler would otherwise hoist above independent
// register arithmetic. The branch tests an index the caller knows is never
// negative (the compiler cannot prove it): never taken, and never dependent
// on tensor values. Its body must be something ptxas does not turn into a
// predicated instruction inside the block (a __syncwarp was, in the 64-row
// kernels, which undid the boundary); a nanosleep is not.
// tests/python/test_sass_audit.py checks the resulting order in the SASS.
CUTE_DEVICE void basic_block_boundary(int never_negative) {
  if (never_negative < 0) asm volatile("nanosleep.u32 0;");
}

// The thread index, read again from its special register: the read is
// volatile, so ptxas neither merges it with an earlier read nor keeps that
// earlier value live to reuse it (flash_fwd_kernel.h reads it after the key
// loop instead of holding it through the loop).
CUTE_DEVICE int fresh_thread_index() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

// WGMMA accumulator ((2, 2, N/8), MMA_M, MMA_N) -> ((2, MMA_M), (2, N/8, MMA_N)):
// mode 0 indexes the rows a thread holds, mode 1 its columns.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_layout_rowcol(Layout l) {
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)),
                     make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

// For 16-bit operands the accumulator of S = Q·Kᵀ holds, register for
// register, the A fragment of O += P·V: ((2, 2, N/8), M, 1) -> ((2, 2, 2), M, N/16).
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_layout_as_a_operand(Layout l) {
  auto split = logical_divide(get<0, 2>(l), Tile<_2>{});
  return make_layout(make_layout(get<0, 0>(l), get<0, 1>(l), get<0, 0>(split)), get<1>(l),
                     coalesce(make_layout(get<0, 1>(split), get<2>(l))));
}

// dst = convert(src), register for register (both fragments hold the same
// number of elements in the same storage order), vectorized by CUTLASS.
template <class EngineS, class LayoutS, class EngineD, class LayoutD>
CUTE_DEVICE void convert_into(Tensor<EngineS, LayoutS> const& src, Tensor<EngineD, LayoutD>& dst) {
  using From = typename EngineS::value_type;
  using To = typename EngineD::value_type;
  constexpr int N = decltype(cosize(LayoutS{}))::value;
  static_assert(N == decltype(cosize(LayoutD{}))::value);
  cutlass::NumericArrayConverter<To, From, N> convert;
  *reinterpret_cast<cutlass::Array<To, N>*>(raw_pointer_cast(dst.data())) =
      convert(*reinterpret_cast<cutlass::Array<From, N> const*>(raw_pointer_cast(src.data())));
}

}  // namespace flashcore::sm90
