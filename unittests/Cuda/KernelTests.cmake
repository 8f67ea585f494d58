# The CUDA kernel tests' sources: each kernel against its CPU twin. Built
# here against the real CUDA runtime (CudaKernelTests, which needs a GPU)
# and in unittests/VirtualGpu against the virtual GPU (VirtualGpuKernelTests).
set(MOE_CUDA_KERNEL_TESTS
  ${CMAKE_CURRENT_LIST_DIR}/KernelTestMain.cpp
  ${CMAKE_CURRENT_LIST_DIR}/AttentionKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Bf16KernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Bf16StorageKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Bf16SumKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ElementwiseKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ExpertRoutingKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/FlashAttentionKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/GemmKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/LayerKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/LossKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/NcclKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/OptimizerKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/RouterKernelTest.cpp
  ${CMAKE_CURRENT_LIST_DIR}/StepScalarsKernelTest.cpp
)
