#!/usr/bin/env python3
"""The CUDA backend's kernels as nvcc compiled them, read back from the
objects of lib/Runtime/Cuda (issue 46, item 6). Two commands, each behind a
script of the same name:

  resources [--objects DIR] [LOG...]    (scripts/cuda-resources.sh)
  coverage [--objects DIR] [--instantiations] LOG...
                                        (scripts/cuda-kernel-coverage.sh)

The objects' kernels come from cuobjdump (--dump-resource-usage for
registers, stack, local and static shared memory; -elf for the maximum
block size a __launch_bounds__ sets), their names demangled by cu++filt (or
c++filt, which spells nvcc's Itanium names the same). A kernel is named as
the demangler prints it without its parameter list:
`moe::rt::cuda::(anonymous namespace)::addKernel<float>`.

LOG is the virtual GPU's launch log (MOE_VIRTUAL_GPU_LAUNCH_LOG=path): one
line per launch, tab-separated,

  kernel  launch-name  grid  block  dynamic-shared-bytes  program

with kernel named as above and grid and block as `x,y,z`. Lines starting
with `#` are comments (the engine writes none; hand-written logs may).

resources prints each kernel's resources per architecture, then checks each
block size and dynamic shared size a kernel is launched with (from the logs;
without logs, the block its __launch_bounds__ allows, and nothing for a
kernel without one) against the SM's limits:
  * the block's registers, as the SM allocates them (per warp, in units of
    256), within the register file of 65536;
  * the block's threads within 1024 and within the kernel's
    __launch_bounds__;
  * static plus dynamic shared memory within the largest a block may opt in
    to (163 KiB on sm_80, 227 KiB on sm_90; on sm_90 ptxas counts the 1 KiB
    the system reserves per block into some kernels' static shared memory,
    so there the check is up to 1 KiB stricter than the device). Above
    48 KiB a launch works only after cudaFuncSetAttribute(
    cudaFuncAttributeMaxDynamicSharedMemorySize) raised the kernel's limit:
    noted, not failed here (the runtime checks the attribute at the launch
    itself, on a GPU and on the virtual GPU).
Spills (a stack frame or local memory) are reported, not failed. It exits 1
when a launch exceeds a limit, naming the kernel, the architecture and the
numbers.

coverage lists each __global__ kernel of the objects with the programs whose
launches reached it, and ends with `N of M kernels launched`. A kernel is a
__global__ definition in the source, as issue 46 counts them: a template's
instantiations are one kernel, launched when any of them is (each is listed
under it, launched or not), and a static kernel of a header that several
files include (addPartialsKernel) is one kernel. --instantiations counts
each instantiation instead. It exits 0 whatever N is.
"""
import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OBJECTS = os.path.join(REPO, "build", "lib", "Runtime", "Cuda",
                               "CMakeFiles", "moe_runtime_cuda.dir")

KIB = 1024
# Per block, for each architecture the backend is built for
# (CMAKE_CUDA_ARCHITECTURES): the CUDA C++ Programming Guide's table of
# technical specifications per compute capability.
LIMITS = {
    "sm_80": {"device": "A100", "shared_optin": 163 * KIB},
    "sm_90": {"device": "H100", "shared_optin": 227 * KIB},
}
SHARED_DEFAULT = 48 * KIB
REGISTER_FILE = 65536
REGISTER_UNIT = 256  # registers are allocated per warp, in units of 256
MAX_BLOCK_THREADS = 1024
WARP = 32


class UsageError(Exception):
    pass


def find_tool(names, variable):
    """The first of `names` on PATH or in the CUDA toolkit's bin, or the
    path in the environment variable `variable`."""
    if os.environ.get(variable):
        return os.environ[variable]
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    for name in names:
        found = shutil.which(name) or shutil.which(
            name, path=os.path.join(cuda_home, "bin"))
        if found:
            return found
    raise UsageError(
        f"none of {', '.join(names)} is on PATH or in {cuda_home}/bin "
        f"(or set {variable}); cuobjdump comes with the CUDA toolkit, or "
        "pip's nvidia-cuda-cuobjdump")


def run(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise UsageError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done.stdout


def strip_trailing_group(name, open_char, close_char):
    """`name` without the balanced group it ends with (`(...)` or
    `<...>`), or None when it ends with none."""
    if not name.endswith(close_char):
        return None
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        if name[i] == close_char:
            depth += 1
        elif name[i] == open_char:
            depth -= 1
            if depth == 0:
                return name[:i]
    return None


def kernel_name(demangled):
    """A demangled kernel symbol without its parameter list, and without the
    return type a template's symbol spells (`void`)."""
    stripped = strip_trailing_group(demangled, "(", ")")
    name = demangled if stripped is None else stripped
    return name[len("void "):] if name.startswith("void ") else name


def template_of(kernel):
    """The kernel's __global__ definition: its name without the template
    arguments it ends with."""
    stripped = strip_trailing_group(kernel, "<", ">")
    return kernel if stripped is None else stripped


class Kernel:
    """One kernel (an instantiation, for a template) of the objects."""

    def __init__(self, name):
        self.name = name
        # arch -> {"registers", "stack", "local", "shared", "max_threads"}
        self.usage = {}
        self.objects = set()


def read_objects(directory):
    """Kernels by name, from the nvcc objects (*.cu.o) in `directory`."""
    objects = sorted(glob.glob(os.path.join(directory, "*.cu.o")))
    if not objects:
        raise UsageError(
            f"no nvcc objects (*.cu.o) in {directory}: build moe_runtime_cuda "
            "first (ninja -C build moe_runtime_cuda)")
    cuobjdump = find_tool(["cuobjdump"], "CUOBJDUMP")
    # (object, arch, mangled) -> usage
    usages = {}
    for path in objects:
        obj = os.path.basename(path)
        arch = None
        function = None
        for line in run([cuobjdump, "--dump-resource-usage", path]).splitlines():
            line = line.strip()
            if line.startswith("arch = "):
                arch = line.split("=", 1)[1].strip()
            elif line.startswith("Function ") and line.endswith(":"):
                function = line[len("Function "):-1]
            elif function and line.startswith("REG:"):
                fields = dict(f.split(":", 1) for f in line.split())
                usages[(obj, arch, function)] = {
                    "registers": int(fields["REG"]),
                    "stack": int(fields["STACK"]),
                    "local": int(fields["LOCAL"]),
                    "shared": int(fields["SHARED"]),
                    "max_threads": None,
                }
                function = None
        arch = None
        section = None
        attribute = None
        for line in run([cuobjdump, "-elf", path]).splitlines():
            stripped = line.strip()
            if stripped.startswith("arch = "):
                arch = stripped.split("=", 1)[1].strip()
            elif line.startswith(".nv.info."):
                section = line[len(".nv.info."):].strip()
            elif line.startswith("."):
                section = None
            elif stripped.startswith("Attribute:"):
                attribute = stripped.split(":", 1)[1].strip()
            elif (section and attribute == "EIATTR_MAX_THREADS"
                  and stripped.startswith("Value:")):
                dims = [int(v, 16) for v in stripped.split(":", 1)[1].split()]
                usage = usages.get((obj, arch, section))
                if usage is not None:
                    usage["max_threads"] = dims[0] * dims[1] * dims[2]
                attribute = None
    mangled = sorted({function for (_, _, function) in usages})
    demangler = find_tool(["cu++filt", "c++filt"], "CUFILT")
    demangled = subprocess.run([demangler], input="\n".join(mangled) + "\n",
                               capture_output=True, text=True,
                               check=True).stdout.splitlines()
    if len(demangled) != len(mangled):
        raise UsageError(f"{demangler} returned {len(demangled)} names for "
                         f"{len(mangled)}")
    names = dict(zip(mangled, (kernel_name(d) for d in demangled)))
    kernels = {}
    for (obj, arch, function), usage in usages.items():
        kernel = kernels.setdefault(names[function], Kernel(names[function]))
        kernel.objects.add(obj)
        # A static kernel of a header is compiled into each file that
        # includes it; the same code, so the same usage, but keep the most.
        previous = kernel.usage.get(arch)
        if previous is None:
            kernel.usage[arch] = usage
        else:
            for key in ("registers", "stack", "local", "shared"):
                previous[key] = max(previous[key], usage[key])
    return kernels


Launch = collections.namedtuple(
    "Launch", "kernel name grid block threads dynamic_shared program where")


def parse_dims(text, where, what):
    parts = text.split(",")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise UsageError(f"{where}: {what} '{text}' is not x,y,z")
    return tuple(int(p) for p in parts)


def read_logs(paths):
    launches = []
    for path in paths:
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except OSError as error:
            raise UsageError(f"cannot read the launch log {path}: "
                             f"{error.strerror}")
        for number, line in enumerate(lines, 1):
            if not line or line.startswith("#"):
                continue
            where = f"{path}:{number}"
            fields = line.split("\t")
            if len(fields) != 6:
                raise UsageError(
                    f"{where}: expected 6 tab-separated fields (kernel, "
                    "launch-name, grid, block, dynamic-shared-bytes, program),"
                    f" found {len(fields)}")
            kernel, name, grid, block, dynamic, program = fields
            block_dims = parse_dims(block, where, "block")
            if not dynamic.isdigit():
                raise UsageError(f"{where}: dynamic shared bytes '{dynamic}' "
                                 "is not a number")
            launches.append(Launch(
                kernel, name, parse_dims(grid, where, "grid"), block_dims,
                block_dims[0] * block_dims[1] * block_dims[2], int(dynamic),
                program, where))
    return launches


def block_registers(registers, threads):
    """Registers a block of `threads` holds: each warp's registers rounded
    up to the allocation unit."""
    warps = -(-threads // WARP)
    per_warp = -(-registers * WARP // REGISTER_UNIT) * REGISTER_UNIT
    return warps * per_warp


def check_launch(arch, usage, threads, dynamic):
    """The limits a launch of `threads` threads and `dynamic` dynamic
    shared bytes exceeds on `arch` (messages), and its notes."""
    limits = LIMITS[arch]
    failures, notes = [], []
    if threads > MAX_BLOCK_THREADS:
        failures.append(f"block of {threads} threads exceeds "
                        f"{MAX_BLOCK_THREADS}")
    if usage["max_threads"] is not None and threads > usage["max_threads"]:
        failures.append(f"block of {threads} threads exceeds its "
                        f"__launch_bounds__ of {usage['max_threads']}")
    registers = block_registers(usage["registers"], threads)
    if registers > REGISTER_FILE:
        failures.append(
            f"{usage['registers']} registers x {threads} threads take "
            f"{registers} registers (allocated per warp in units of "
            f"{REGISTER_UNIT}), above the SM's {REGISTER_FILE}")
    shared = usage["shared"] + dynamic
    if shared > limits["shared_optin"]:
        failures.append(
            f"shared memory {usage['shared']} static + {dynamic} dynamic = "
            f"{shared} bytes exceeds {arch}'s {limits['shared_optin']} "
            f"({limits['shared_optin'] // KIB} KiB, {limits['device']}, "
            "with opt-in)")
    elif shared > SHARED_DEFAULT:
        notes.append(f"{shared} bytes of shared memory: above 48 KiB, needs "
                     "cudaFuncAttributeMaxDynamicSharedMemorySize")
    return registers, shared, failures, notes


def resources(args):
    kernels = read_objects(args.objects)
    launches = read_logs(args.logs)
    archs = sorted({arch for k in kernels.values() for arch in k.usage})
    unknown_archs = [arch for arch in archs if arch not in LIMITS]
    if unknown_archs:
        raise UsageError(f"no limits known for {', '.join(unknown_archs)}: "
                         "add them to LIMITS in scripts/cuda_kernels.py")

    print(f"# Kernels of {args.objects}")
    print("arch\tregisters\tstack\tlocal\tstatic-shared\tlaunch-bounds\tkernel")
    spills = []
    for name in sorted(kernels):
        for arch in archs:
            usage = kernels[name].usage.get(arch)
            if usage is None:
                continue
            bounds = usage["max_threads"] or "-"
            print(f"{arch}\t{usage['registers']}\t{usage['stack']}\t"
                  f"{usage['local']}\t{usage['shared']}\t{bounds}\t{name}")
            if usage["stack"] or usage["local"]:
                spills.append(f"{arch} {name}: stack {usage['stack']}, "
                              f"local {usage['local']} bytes")

    print()
    if spills:
        print(f"# Spills or local arrays (reported, not failed): "
              f"{len(spills)}")
        for spill in spills:
            print(f"spill: {spill}")
        print()

    # (kernel, threads, dynamic) -> launch names and programs.
    configurations = collections.OrderedDict()
    unknown_kernels = collections.OrderedDict()
    if launches:
        print(f"# Launches of {', '.join(args.logs)}")
        for launch in launches:
            if launch.kernel not in kernels:
                unknown_kernels.setdefault(launch.kernel, launch.where)
                continue
            key = (launch.kernel, launch.threads, launch.dynamic_shared)
            configurations.setdefault(key, set()).add(launch.name)
        unchecked = sorted(set(kernels) - {k for (k, _, _) in configurations})
        unchecked_why = "not launched in the logs"
    else:
        print("# No launch log: blocks from __launch_bounds__, dynamic shared "
              "memory 0; a kernel without __launch_bounds__ is not checked "
              "(its block size is unknown)")
        unchecked = []
        for name in sorted(kernels):
            bounds = {u["max_threads"] for u in kernels[name].usage.values()}
            if None in bounds:
                unchecked.append(name)
                continue
            for threads in sorted(bounds):
                configurations[(name, threads, 0)] = {"__launch_bounds__"}
        unchecked_why = "block size unknown"

    print("arch\tblock\tdynamic-shared\tregisters\tshared\tverdict\tkernel "
          "(launches)")
    failures = []
    for (name, threads, dynamic), launch_names in configurations.items():
        for arch in archs:
            usage = kernels[name].usage.get(arch)
            if usage is None:
                continue
            registers, shared, failed, notes = check_launch(
                arch, usage, threads, dynamic)
            verdict = "FAIL" if failed else "ok"
            print(f"{arch}\t{threads}\t{dynamic}\t{registers}/{REGISTER_FILE}"
                  f"\t{shared}/{LIMITS[arch]['shared_optin']}\t{verdict}\t"
                  f"{name} ({', '.join(sorted(launch_names))})")
            for note in notes:
                print(f"  note: {note}")
            for message in failed:
                failures.append(f"{arch} {name}: {message}")
    for name in unchecked:
        print(f"-\t-\t-\t-\t-\tunchecked\t{name} ({unchecked_why})")
    for name, where in unknown_kernels.items():
        print(f"-\t-\t-\t-\t-\tunknown\t{name} ({where}: not a kernel of the "
              "nvcc objects)")

    print()
    if failures:
        for failure in failures:
            print(f"FAIL: {failure}")
        print(f"cuda-resources: {len(failures)} launch limits exceeded")
        return 1
    print(f"cuda-resources: {len(configurations)} launch configurations "
          f"within {', '.join(archs)}'s limits, {len(unchecked)} kernels "
          "unchecked")
    return 0


def coverage(args):
    kernels = read_objects(args.objects)
    launches = read_logs(args.logs)
    programs = collections.defaultdict(set)
    unknown = collections.OrderedDict()
    for launch in launches:
        if launch.kernel in kernels:
            programs[launch.kernel].add(launch.program)
        else:
            unknown.setdefault(launch.kernel, set()).add(launch.program)

    definitions = collections.defaultdict(list)
    for name in kernels:
        definitions[template_of(name)].append(name)

    def listed(names):
        found = sorted({p for n in names for p in programs.get(n, ())})
        return ", ".join(found) if found else "-"

    launched = 0
    for definition in sorted(definitions):
        instances = sorted(definitions[definition])
        is_template = instances != [definition]
        if args.instantiations:
            for name in instances:
                launched += bool(programs.get(name))
                print(f"{'launched' if programs.get(name) else 'never'}\t"
                      f"{name}\t{listed([name])}")
            continue
        any_launched = any(programs.get(name) for name in instances)
        launched += any_launched
        print(f"{'launched' if any_launched else 'never'}\t{definition}\t"
              f"{listed(instances)}")
        if is_template:
            for name in instances:
                print(f"  {name[len(definition):]}\t{listed([name])}")
    for name, users in unknown.items():
        print(f"unknown\t{name}\t{', '.join(sorted(users))} (not a kernel of "
              "the nvcc objects)")
    total = len(kernels) if args.instantiations else len(definitions)
    what = "kernel instantiations" if args.instantiations else "kernels"
    print(f"{launched} of {total} {what} launched")
    return 0


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for command, logs in (("resources", "*"), ("coverage", "+")):
        sub = commands.add_parser(command)
        sub.add_argument("--objects", default=DEFAULT_OBJECTS,
                         help="the nvcc objects' directory (default: "
                         "build/lib/Runtime/Cuda/CMakeFiles/moe_runtime_cuda.dir)")
        if command == "coverage":
            sub.add_argument("--instantiations", action="store_true",
                             help="count each template instantiation")
        sub.add_argument("logs", nargs=logs, metavar="LOG",
                         help="a launch log of the virtual GPU")
    args = parser.parse_args()
    try:
        return resources(args) if args.command == "resources" else coverage(args)
    except UsageError as error:
        script = {"resources": "cuda-resources", "coverage": "cuda-kernel-coverage"}
        print(f"{script[args.command]}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
