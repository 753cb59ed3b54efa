"""The workloads a simulated fleet runs: kernel mixes, launch configurations and copies per job.

Each workload describes one *step* of a real PyTorch program (a training iteration, or one decode
iteration of an inference server): which kernels it launches, how often, with which launch
configurations and mean per-launch durations, and which memory copies it makes. Names are the
demangled names CUPTI reports for these kernels on sm90 (H100/H200); ``mangled`` is a plausible
Itanium-mangled name whose hash (``shards.kernel_id_of``) is the kernel's stable id. cuBLAS/cuDNN
``sm90_xmma_*`` kernels are ``extern "C"``, so their mangled and demangled names are the same.

Durations and launch counts are in the range of an 8B-parameter LLM (FSDP over 8 H200), a ViT-L/16
(DDP over 4 GPUs) and a vLLM-style decode server on one GPU per replica; they are plausible, not
measured.
"""

from __future__ import annotations

from simulator.specs import CLASS_NOISE, KERNEL_CLASSES, CopySpec, KernelSpec, LaunchConfig, Workload

__all__ = ["CLASS_NOISE", "KERNEL_CLASSES", "CopySpec", "KernelSpec", "LaunchConfig", "Workload",
           "TRAIN_LLAMA", "TRAIN_VIT", "SERVE_LLAMA", "GEMM_TN_128"]


def _cfg(grid, block, regs, smem, per_step, mean_us) -> LaunchConfig:
    grid = tuple(grid) + (1,) * (3 - len(grid))
    block = tuple(block) + (1,) * (3 - len(block))
    return LaunchConfig(grid, block, regs, smem, per_step, mean_us)


def _cublas(name: str, klass: str, *configs: LaunchConfig) -> KernelSpec:
    return KernelSpec(name, name, klass, tuple(configs))


def _nccl(coll: str, dtype: str = "bf16", *configs: LaunchConfig) -> KernelSpec:
    base = f"ncclDevKernel_{coll}_{dtype}_RING_LL" if dtype else f"ncclDevKernel_{coll}_RING_LL"
    return KernelSpec(f"{base}(ncclDevKernelArgsStorage<4096ul>)", f"_Z{len(base)}{base}24ncclDevKernelArgsStorageILm4096EE", "nccl", tuple(configs))


# ---------------------------------------------------------------------------------------------
# Kernel names shared by workloads (demangled, mangled).
_ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIN3c108BFloat16EEENS_6detail5ArrayIPcLi3EEEEEviT0_T1_",
)
_MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, "
    "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
    "at::detail::Array<char*, 3>)",
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13BinaryFunctorIN3c108BFloat16ES4_S4_NS0_15binary_internal10MulFunctorIfEEEENS_6detail5ArrayIPcLi3EEEEEviT0_T1_",
)
_SILU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}"
    "::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >"
    "(int, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() "
    "const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)",
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_11silu_kernelERNS_18TensorIteratorBaseEENKUlvE_clEvENKUlvE2_clEvEUlN3c108BFloat16EE_NS_6detail5ArrayIPcLi2EEEEEviT0_T1_",
)
_GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, "
    "at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
    "{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)",
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_18GeluCUDAKernelImplERNS_18TensorIteratorBaseENS0_8GeluTypeEENKUlvE0_clEvENKUlvE2_clEvEUlN3c108BFloat16EE_NS_6detail5ArrayIPcLi2EEEEEviT0_T1_",
)
_SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, "
    "float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)",
    "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_14func_wrapper_tIfZNS0_11sum_functorIfffEclERNS_14TensorIteratorEEUlffE_EEjfLi4EEEEEvT1_",
)
_ARGMAX = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4> >"
    "(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4>)",
    "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_9ArgMaxOpsIfEEjlLi4EEEEEvT1_",
)
_LAYER_NORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
    "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
    "_ZN2at6native12_GLOBAL__N_128vectorized_layer_norm_kernelIN3c108BFloat16EfEEviT0_PKT_S8_S8_PS5_SA_PS6_",
)
_LAYER_NORM_BWD = (
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>("
    "c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)",
    "_ZN2at6native12_GLOBAL__N_139layer_norm_grad_input_kernel_vectorizedIN3c108BFloat16EfEEvPKT_S7_PKT0_SA_S7_PS4_i",
)
_LOG_SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
    "_ZN2at6native12_GLOBAL__N_119cunn_SoftMaxForwardILi4EfffNS1_25LogSoftMaxForwardEpilogueEEEvPT2_PKT0_i",
)
_SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "_ZN2at6native12_GLOBAL__N_119cunn_SoftMaxForwardILi4EfffNS1_22SoftMaxForwardEpilogueEEEvPT2_PKT0_i",
)
_ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, "
    "false>, double*, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::"
    "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, "
    "false>, double*, double, double, double, double, double, bool, float*, float*)",
    "_ZN2at6native12_GLOBAL__N_125multi_tensor_apply_kernelINS1_18TensorListMetadataILi4EEENS1_20FusedAdamMathFunctorIfLi4ELNS0_9ADAM_MODEE1ELb0EEEJPddddddbPfS8_EEEvT_T0_DpT1_",
)
_COPY = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>, "
    "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
    "at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}"
    "::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>, "
    "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
    "at::native::memory::StoreWithCast<1>)",
    "_ZN2at6native27unrolled_elementwise_kernelIZZZNS0_23direct_copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE6_clEvEUlfE_NS_6detail5ArrayIPcLi2EEE23TrivialOffsetCalculatorILi1EjESC_NS0_6memory12LoadWithCastILi1EEENSD_13StoreWithCastILi1EEEEEviT_T0_T1_T2_T3_T4_",
)
_FLASH_FWD = (
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, false, true, false, false>"
    "(Flash_fwd_params)",
    "_Z16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128ELi128ELi64ELi4ELb0ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi128ELi128ELi64ELi4ES2_EELb0ELb1ELb0ELb0ELb0ELb1ELb0ELb0EEv16Flash_fwd_params",
)
_FLASH_BWD = (
    "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, false, false, false, "
    "false>(Flash_bwd_params)",
    "_Z44flash_bwd_dq_dk_dv_loop_seqk_parallel_kernelI23Flash_bwd_kernel_traitsILi128ELi64ELi128ELi8ELi2ELi4ELi2ELb0ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi128ELi64ELi128ELi8ES2_EELb1ELb0ELb0ELb0ELb0ELb0EEv16Flash_bwd_params",
)
_FLASH_FWD64 = (
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, false, false, false, false, true, false, false>"
    "(Flash_fwd_params)",
    "_Z16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi64ELi128ELi128ELi4ELb0ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi64ELi128ELi128ELi4ES2_EELb0ELb0ELb0ELb0ELb0ELb1ELb0ELb0EEv16Flash_fwd_params",
)
_FLASH_BWD64 = (
    "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, 2, 4, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::bfloat16_t> >, false, false, false, false, false, "
    "false>(Flash_bwd_params)",
    "_Z44flash_bwd_dq_dk_dv_loop_seqk_parallel_kernelI23Flash_bwd_kernel_traitsILi64ELi128ELi128ELi8ELi2ELi4ELi4ELb0ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi64ELi128ELi128ELi8ES2_EELb0ELb0ELb0ELb0ELb0ELb0EEv16Flash_bwd_params",
)
_SPLITKV = (
    "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, false, false, false, true, true, false, false>"
    "(Flash_fwd_params)",
    "_Z24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi128ELi64ELi128ELi4ELb0ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi128ELi64ELi128ELi4ES2_EELb0ELb0ELb0ELb0ELb1ELb1ELb0ELb0EEv16Flash_fwd_params",
)
_SPLITKV_COMBINE = (
    "void flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, 4, 3, true>(Flash_fwd_params)",
    "_Z32flash_fwd_splitkv_combine_kernelI23Flash_fwd_kernel_traitsILi128ELi64ELi128ELi4ELb0ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi128ELi64ELi128ELi4ES2_EELi4ELi3ELb1EEv16Flash_fwd_params",
)


def _k(names: tuple[str, str], klass: str, *configs: LaunchConfig) -> KernelSpec:
    return KernelSpec(names[0], names[1], klass, tuple(configs))


GEMM_TN_128 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
GEMM_NT_256 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
GEMM_NN_128x256 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
GEMM_TN_64 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
CONV_FPROP = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_kernel__5x_cudnn"
CONV_WGRAD = "sm90_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_kernel__5x_cudnn"

_SMEM_XMMA = 213_248
_PERSIST = (132, 1, 1)  # persistent sm90 GEMMs launch one CTA per SM (132 SMs on H100/H200 SXM)

TRAIN_LLAMA = Workload(
    name="train-llama",
    kind="training",
    busy=0.90,
    mem_gb=118.0,
    kernels=(
        _cublas(GEMM_TN_128, "gemm", _cfg(_PERSIST, (384,), 168, _SMEM_XMMA, 224, 620.0)),
        _cublas(GEMM_NT_256, "gemm", _cfg(_PERSIST, (384,), 168, 221_184, 224, 655.0)),
        _cublas(GEMM_NN_128x256, "gemm", _cfg(_PERSIST, (384,), 168, 221_184, 224, 640.0)),
        _k(_FLASH_FWD, "attention", _cfg((64, 32), (128,), 255, 49_152, 32, 1450.0)),
        _k(_FLASH_BWD, "attention", _cfg((64, 32), (256,), 255, 98_304, 32, 3900.0)),
        _k(_LAYER_NORM, "norm", _cfg((8192,), (128,), 40, 0, 130, 48.0)),
        _k(_ADD, "elementwise", _cfg((65536,), (128,), 24, 0, 64, 52.0), _cfg((16384,), (128,), 24, 0, 96, 15.0),
           _cfg((256,), (128,), 24, 0, 32, 3.6)),
        _k(_SILU, "elementwise", _cfg((229376,), (128,), 24, 0, 32, 160.0), _cfg((57344,), (128,), 24, 0, 32, 42.0)),
        _k(_MUL, "elementwise", _cfg((229376,), (128,), 26, 0, 32, 170.0), _cfg((65536,), (128,), 26, 0, 64, 50.0)),
        _k(_SUM, "reduce", _cfg((1024,), (32, 16), 32, 2_048, 16, 38.0), _cfg((132,), (32, 16), 32, 2_048, 8, 11.0)),
        _k(_LOG_SOFTMAX, "softmax", _cfg((8192,), (1024,), 36, 0, 1, 2600.0)),
        _k(_ADAM, "optimizer", _cfg((320,), (512,), 72, 0, 24, 360.0)),
        _k(_COPY, "copy", _cfg((32768,), (128,), 20, 0, 64, 21.0), _cfg((2048,), (128,), 20, 0, 32, 4.2)),
        _nccl("ReduceScatter_Sum", "bf16", _cfg((16,), (512,), 96, 0, 32, 2300.0)),
        _nccl("AllGather", "", _cfg((16,), (512,), 96, 0, 64, 1350.0)),
        _nccl("AllReduce_Sum", "bf16", _cfg((16,), (512,), 96, 0, 2, 160.0)),
    ),
    latent=(
        _k(("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, "
            "unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::OpaqueType<2u>*, at::native::(anonymous namespace)::"
            "CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 64, 64>, "
            "at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
            "_ZN2at6native12_GLOBAL__N_119CatArrayBatchedCopyINS1_10OpaqueTypeILj2EEEjLi4ELi64ELi64EEEvPT_NS1_25CatArrInputTensorMetadataIS5_T0_XT2_EXT3_EEENS1_16TensorSizeStrideIS8_Lj4EEEiS8_"),
           "copy", _cfg((4096, 4), (512,), 32, 0, 64, 0.0)),
    ),
    copies=(
        CopySpec("HtoD", "pinned", "device", 2, 65_536, 22.0, 4.0),
        CopySpec("DtoH", "device", "pageable", 1, 4, 0.5, 9.0),
        CopySpec("DtoD", "device", "device", 48, 33_554_432, 1_300.0, 2.0),
    ),
)

TRAIN_VIT = Workload(
    name="train-vit",
    kind="training",
    busy=0.84,
    mem_gb=61.0,
    kernels=(
        _cublas(CONV_FPROP, "conv", _cfg((196, 8), (256,), 232, 196_608, 1, 880.0)),
        _cublas(CONV_WGRAD, "conv", _cfg((8, 6), (256,), 232, 196_608, 1, 1250.0)),
        _cublas(GEMM_TN_128, "gemm", _cfg(_PERSIST, (384,), 168, _SMEM_XMMA, 96, 540.0)),
        _cublas(GEMM_NT_256, "gemm", _cfg(_PERSIST, (384,), 168, 221_184, 96, 575.0)),
        _cublas(GEMM_NN_128x256, "gemm", _cfg(_PERSIST, (384,), 168, 221_184, 96, 560.0)),
        _k(_FLASH_FWD64, "attention", _cfg((2, 2048), (128,), 255, 49_152, 24, 640.0)),
        _k(_FLASH_BWD64, "attention", _cfg((2, 2048), (256,), 255, 98_304, 24, 1800.0)),
        _k(_LAYER_NORM, "norm", _cfg((25216,), (128,), 40, 0, 49, 58.0)),
        _k(_LAYER_NORM_BWD, "norm", _cfg((25216,), (128,), 48, 0, 49, 92.0)),
        _k(_GELU, "elementwise", _cfg((103424,), (128,), 28, 0, 46, 135.0), _cfg((25856,), (128,), 28, 0, 4, 36.0)),
        _k(_ADD, "elementwise", _cfg((25216,), (128,), 24, 0, 48, 26.0), _cfg((1024,), (128,), 24, 0, 96, 3.8),
           _cfg((197,), (128,), 24, 0, 24, 2.9)),
        _k(_SUM, "reduce", _cfg((1024,), (32, 16), 32, 2_048, 96, 21.0), _cfg((64,), (32, 16), 32, 2_048, 24, 6.5)),
        _k(_LOG_SOFTMAX, "softmax", _cfg((128,), (1024,), 36, 0, 1, 14.0)),
        _k(_ADAM, "optimizer", _cfg((288,), (512,), 72, 0, 12, 290.0)),
        _nccl("AllReduce_Sum", "bf16", _cfg((16,), (512,), 96, 0, 26, 1550.0)),
    ),
    latent=(
        _k(("void at::native::(anonymous namespace)::upsample_bilinear2d_out_frame<c10::BFloat16, float>(int, float, float, "
            "bool, at::GenericPackedTensorAccessor<c10::BFloat16, 4ul, at::DefaultPtrTraits, long>, "
            "at::GenericPackedTensorAccessor<c10::BFloat16, 4ul, at::DefaultPtrTraits, long>)",
            "_ZN2at6native12_GLOBAL__N_129upsample_bilinear2d_out_frameIN3c108BFloat16EfEEviT0_S5_bNS_27GenericPackedTensorAccessorIT_Lm4ENS_17DefaultPtrTraitsElEES9_"),
           "elementwise", _cfg((1568,), (1024,), 38, 0, 1, 0.0)),
    ),
    copies=(
        CopySpec("HtoD", "pinned", "device", 1, 19_267_584, 22.5, 5.0),
        CopySpec("HtoD", "pinned", "device", 1, 1_024, 22.5, 4.0),
        CopySpec("DtoH", "device", "pageable", 1, 4, 0.5, 9.0),
        CopySpec("DtoD", "device", "device", 8, 8_388_608, 1_250.0, 2.0),
    ),
)

SERVE_LLAMA = Workload(
    name="serve-llama",
    kind="inference",
    busy=0.78,
    trough=0.28,
    peak_hour_utc=15,
    mem_gb=127.0,
    kernels=(
        _cublas(GEMM_TN_64, "gemm", _cfg((132,), (256,), 154, 164_864, 64, 82.0), _cfg((132,), (256,), 154, 164_864, 64, 118.0)),
        _cublas(GEMM_TN_128, "gemm", _cfg(_PERSIST, (384,), 168, _SMEM_XMMA, 1, 830.0)),
        _k(_SPLITKV, "attention", _cfg((1, 32, 64), (128,), 255, 49_152, 32, 58.0)),
        _k(_SPLITKV_COMBINE, "attention", _cfg((64,), (128,), 64, 0, 32, 6.0)),
        _k(("void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, float, int, int)",
            "_ZN4vllm15rms_norm_kernelIN3c108BFloat16EEEvPT_PKS3_S6_fii"),
           "norm", _cfg((64,), (1024,), 32, 0, 1, 7.5)),
        _k(("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, float, int, int)",
            "_ZN4vllm25fused_add_rms_norm_kernelIN3c108BFloat16ELi8EEENSt9enable_ifIXaagtT0_Li0Esr12_typeConvertIT_EE6existsEvE4typeEPS4_S7_PKS4_fii"),
           "norm", _cfg((64,), (1024,), 32, 0, 64, 6.8)),
        _k(("void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>(c10::BFloat16 const&)), true>"
            "(c10::BFloat16*, c10::BFloat16 const*, int)",
            "_ZN4vllm18act_and_mul_kernelIN3c108BFloat16EXadL_ZNS_11silu_kernelIS2_EET_RKS4_EELb1EEEvPS4_PS5_i"),
           "elementwise", _cfg((64,), (1024,), 30, 0, 32, 11.5)),
        _k(("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, "
            "c10::BFloat16 const*, int, long, long, long, int, int, int)",
            "_ZN4vllm23rotary_embedding_kernelIN3c108BFloat16ELb1EEEvPKlPT_S6_PKS5_illliii"),
           "elementwise", _cfg((64,), (512,), 40, 0, 32, 4.1)),
        _k(("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, "
            "__nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, int, int, int, int, int, int, float const*, float const*)",
            "_ZN4vllm30reshape_and_cache_flash_kernelI13__nv_bfloat16S1_LNS_18Fp8KVCacheDataTypeE0EEEvPKT_S6_PT0_S8_PKliiiiiiPKfSC_"),
           "copy", _cfg((64,), (512,), 36, 0, 32, 3.9)),
        _k(_SOFTMAX, "softmax", _cfg((64,), (1024,), 36, 0, 1, 62.0)),
        _k(_ARGMAX, "reduce", _cfg((64,), (32, 16), 40, 4_096, 1, 36.0), _cfg((8,), (32, 16), 40, 4_096, 1, 9.0)),
        _k(_ADD, "elementwise", _cfg((512,), (128,), 24, 0, 2, 3.1), _cfg((64,), (128,), 24, 0, 1, 2.6)),
    ),
    latent=(
        _k(("void at::native::bitonicSortKVInPlace<2, -1, 16, 16, float, long, at::native::GTOp<float, true>, unsigned int>("
            "at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, unsigned int, unsigned int, "
            "at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, at::native::GTOp<float, true>)",
            "_ZN2at6native20bitonicSortKVInPlaceILi2ELin1ELi16ELi16EflNS0_4GTOpIfLb1EEEjEEvNS_4cuda6detail10TensorInfoIT3_T6_EES8_S8_S8_NS6_IT4_S8_EES8_T5_"),
           "sort", _cfg((64,), (16, 16), 64, 4_096, 1, 0.0)),
    ),
    copies=(
        CopySpec("HtoD", "pinned", "device", 3, 8_192, 21.0, 3.5),
        CopySpec("DtoH", "device", "pinned", 1, 512, 19.0, 3.0),
        CopySpec("DtoD", "device", "device", 2, 1_048_576, 1_100.0, 2.0),
    ),
)

WORKLOADS: dict[str, Workload] = {w.name: w for w in (TRAIN_LLAMA, TRAIN_VIT, SERVE_LLAMA)}
