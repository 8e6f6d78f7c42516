"""Runs a Python script (argv[1:], as `python3 SCRIPT ARGS`) with CUDA's caching allocator capped at an H100 80 GB's
memory less its context: torch.cuda.set_per_process_memory_fraction(CAP_MIB / the device's total), so an allocation
past it fails with an out-of-memory error as it would on the H100. At exit prints the peaks (allocated, reserved)."""
import atexit, os, runpy, sys
import torch

CAP_MIB = int(os.environ.get("CAP_MIB", 80_896))  # 79 GiB: an H100 80 GB's 81,559 MiB less ~660 MiB of context
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(CAP_MIB * 2**20 / total, 0)
print(f"cap80: device {torch.cuda.get_device_name(0)} total {total // 2**20} MiB, allocator capped at {CAP_MIB} MiB",
      flush=True)
atexit.register(lambda: print(f"cap80: peak allocated {torch.cuda.max_memory_allocated(0) // 2**20} MiB, peak "
                              f"reserved {torch.cuda.max_memory_reserved(0) // 2**20} MiB", flush=True))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
