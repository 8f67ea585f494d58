# The CUDA backend's sources, shared by the nvcc build (this directory) and
# the virtual GPU's host-compiler build of the same files
# (lib/Runtime/VirtualGpu).
set(MOE_CUDA_HOST_SOURCES
  AdamwBatches.cpp
  CollectiveWatch.cpp
  CommStream.cpp
  CudaBackend.cpp
  CudaStatus.cpp
  Device.cpp
  DeviceBf16.cpp
  DeviceDispatch.cpp
  DeviceExpertParallel.cpp
  DeviceExperts.cpp
  DevicePipeline.cpp
  DeviceStep.cpp
  ExpertMatmul.cpp
  Gemm.cpp
  Nccl.cpp
  PinnedStaging.cpp
  StepCheck.cpp
  StepTimeline.cpp)
set(MOE_CUDA_KERNEL_SOURCES
  Attention.cu
  Bf16Sum.cu
  Elementwise.cu
  Embedding.cu
  ExpertRouting.cu
  FlashAttention.cu
  Fp8Blocks.cu
  Fp8Rows.cu
  GroupSums.cu
  Losses.cu
  Optimizer.cu
  RmsNorm.cu
  Rope.cu
  Router.cu
  StepScalars.cu)
