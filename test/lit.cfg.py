# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "MOE"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.moe_obj_root, "test")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "reference", "Inputs"]

config.substitutions.append(("%models", os.path.join(config.moe_src_root, "models")))
config.substitutions.append(("%reference", os.path.join(config.moe_src_root, "test", "reference")))
config.substitutions.append(("%inputs", os.path.join(config.moe_src_root, "test", "Inputs")))
# Debian's python3 has torch and numpy; a pyenv python on PATH may not.
config.substitutions.append(("%python", "/usr/bin/python3"))
config.substitutions.append(("%moe_tools_dir", config.moe_tools_dir))
# Multi-rank tests (test/comm) on this one machine: Open MPI refuses root
# without --allow-run-as-root, the tests start more ranks than there are cores,
# and shared memory is the only transport they need. Every MPI process (also
# one started without mpirun) gets its own session directory: under the TMPDIR
# that lit shares between parallel tests, two jobs creating it at once fail
# with "mkdir ... File exists" (Open MPI 4.1).
mpienv = "env OMPI_MCA_orte_tmpdir_base=%t.ompi"
config.substitutions.append(("%mpienv", mpienv))
config.substitutions.append(
    ("%mpirun",
     mpienv + " mpirun --allow-run-as-root --oversubscribe --mca btl self,vader"))

# A Python with HF transformers (scripts/test-all.sh makes build/hf-venv),
# for the test that loads our weights into MixtralForCausalLM.
hf_python = os.path.join(config.moe_obj_root, "hf-venv", "bin", "python")
if os.path.exists(hf_python):
    config.available_features.add("hf-transformers")
    config.substitutions.append(("%hf_python", hf_python))

# TensorBoard from PyPI (scripts/test-all.sh makes build/tb-venv), whose
# own reader loads moe-run's event files (test/moe-run/tensorboard.test).
tb_python = os.path.join(config.moe_obj_root, "tb-venv", "bin", "python")
if os.path.exists(tb_python):
    config.available_features.add("tensorboard")
    config.substitutions.append(("%tb_python", tb_python))

# HF tokenizers and sentencepiece from PyPI (scripts/test-all.sh makes
# build/tok-venv), which train the tokenizers that moe-data's ids are
# checked against (test/moe-data).
tok_python = os.path.join(config.moe_obj_root, "tok-venv", "bin", "python")
if os.path.exists(tok_python):
    config.available_features.add("tokenizers")
    config.substitutions.append(("%tok_python", tok_python))

# Current PyTorch and HF transformers from PyPI (scripts/test-all.sh makes
# build/hf-current-venv), for HF's own Qwen3-MoE and DeepSeek-V3 (test/hf).
hf_current_python = os.path.join(config.moe_obj_root, "hf-current-venv", "bin", "python")
if os.path.exists(hf_current_python):
    config.available_features.add("hf-current")
    config.substitutions.append(("%hf_current_python", hf_current_python))

# The CUDA backend is built (the toolkit is there; a GPU need not be).
if config.moe_cuda_backend.upper() in ("ON", "TRUE", "1", "YES"):
    config.available_features.add("cuda-build")
# The virtual GPU (lib/Runtime/VirtualGpu): the CUDA backend's sources run
# on the CPU. %virtual_gpu is the flags that put moe-run on it: the tests in
# test/virtual-gpu (and test/gpu's, through %cuda_device, where no GPU is).
if config.moe_virtual_gpu.upper() in ("ON", "TRUE", "1", "YES"):
    config.available_features.add("virtual-gpu")
config.substitutions.append(("%virtual_gpu", "--device cuda --virtual-gpu h100"))
# cuobjdump (the toolkit's, or pip's nvidia-cuda-cuobjdump), which reads
# the CUDA backend's objects for scripts/cuda-resources.sh and
# scripts/cuda-kernel-coverage.sh (test/virtual-gpu).
# scripts/test-all.sh installs pip's into build/cuobjdump-venv where the
# toolkit has none (CUDA 13.0's pip-built toolkit here lacks it).
import glob, shutil
cuda_bin = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin")
cuobjdump = shutil.which("cuobjdump") or shutil.which("cuobjdump", path=cuda_bin)
if not cuobjdump:
    pip_cuobjdump = sorted(glob.glob(os.path.join(
        config.moe_obj_root, "cuobjdump-venv", "lib", "python3*",
        "site-packages", "nvidia", "cu*", "bin", "cuobjdump")))
    if pip_cuobjdump:
        cuobjdump = pip_cuobjdump[-1]
        config.environment["CUOBJDUMP"] = cuobjdump
if cuobjdump:
    config.available_features.add("cuobjdump")
# A cpu-target artifact that the CUDA backend also runs (test/gpu): without
# the ops only the CPU backend has (the fused LM head and GEMM epilogues,
# the routers' load counters; docs/semantics.md).
config.substitutions.append(
    ("%cuda_compatible",
     "--fuse-lm-head-loss=false --fuse-gemm-epilogues=false --count-expert-loads=false"))
config.substitutions.append(("%moe_src", config.moe_src_root))
config.substitutions.append(("%moe_obj", config.moe_obj_root))

# A GPU the CUDA backend can use (the device machine; never CI): the tests
# that train on it need this feature.
import shutil, subprocess
if shutil.which("nvidia-smi"):
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                                text=True, timeout=30)
        gpus = listed.stdout.count("GPU ") if listed.returncode == 0 else 0
        if gpus >= 1:
            config.available_features.add("cuda-device")
        if gpus >= 2:
            config.available_features.add("cuda-devices-2")
    except (OSError, subprocess.SubprocessError):
        pass

# Slurm and munge (Debian's slurm-wlm, munge): the tests start their own
# cluster on this machine (scripts/slurm-localhost.sh).
if all(shutil.which(tool) for tool in ("slurmctld", "slurmd", "munged", "sbatch")):
    config.available_features.add("slurm")
config.substitutions.append(
    ("%slurm", os.path.join(config.moe_src_root, "scripts", "slurm-localhost.sh")))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.moe_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
# OpenBLAS picks its thread count from the machine; tests pin it so that
# results are reproducible across machines.
llvm_config.with_environment("OPENBLAS_NUM_THREADS", "1")
# Which GEMM kernel OpenBLAS uses is the caller's choice: lit scrubs the
# environment, so an OPENBLAS_CORETYPE the caller set (to run the suite under
# Prescott, Haswell or SkylakeX kernels) is passed through. This sets nothing:
# without it OpenBLAS picks by the CPU, and no test may depend on that pick.
if "OPENBLAS_CORETYPE" in os.environ:
    config.environment["OPENBLAS_CORETYPE"] = os.environ["OPENBLAS_CORETYPE"]

# Slow tests (REQUIRES: slow), such as the multi-seed comparison of FP8 and
# fp32 training: off by default, on with MOE_SLOW_TESTS=1 in the environment
# or `lit --param slow=1` (.ci/run turns them on).
slow = lit_config.params.get("slow", os.environ.get("MOE_SLOW_TESTS", "0"))
if slow not in ("", "0", "1"):
    lit_config.fatal(f"slow tests: unknown setting '{slow}' "
                     "(MOE_SLOW_TESTS or --param slow): expected 0 or 1")
if slow == "1":
    config.available_features.add("slow")

llvm_config.add_tool_substitutions(["moe-opt", "moec", "moe-import"],
                                   [config.moe_tools_dir])
# scripts/sanitize.sh runs tests with the runtime tools of its AddressSanitizer
# build (--param runtime_tools_dir=...) and this build's compiler.
runtime_tools_dir = lit_config.params.get("runtime_tools_dir",
                                          config.moe_tools_dir)
if not os.path.isfile(os.path.join(runtime_tools_dir, "moe-run")):
    lit_config.fatal(f"runtime_tools_dir '{runtime_tools_dir}' holds no moe-run")
llvm_config.add_tool_substitutions(["moe-run", "moe-data", "moe-fuzz-artifact"],
                                   [runtime_tools_dir])
