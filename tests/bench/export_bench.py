"""export_bench.py - the safetensors side of tests/bench/export_bench.sh,
run in the torch 2.x root (safetensors exists only there):

  export_bench.py save SRC DST   load_file(SRC) into memory, then time
                                 safetensors.torch.save_file of it to DST
  export_bench.py load PATH      time load_file(PATH) and a touch of every
                                 page of every tensor (load_file maps the
                                 file: its bytes are read when touched)

Each prints one line: the seconds of the timed call, and the bytes."""
import sys
import time

import safetensors.torch as st
import torch


def main():
    cmd = sys.argv[1]
    if cmd == "save":
        state = st.load_file(sys.argv[2])
        n = sum(t.numel() * t.element_size() for t in state.values())
        t0 = time.perf_counter()
        st.save_file(state, sys.argv[3])
        print("%.4f %d" % (time.perf_counter() - t0, n))
    elif cmd == "load":
        t0 = time.perf_counter()
        state = st.load_file(sys.argv[2])
        for t in state.values():
            flat = t.reshape(-1).view(torch.uint8)
            int(flat[::4096].sum())
        dt = time.perf_counter() - t0
        n = sum(t.numel() * t.element_size() for t in state.values())
        print("%.4f %d" % (dt, n))
    else:
        sys.exit("usage: export_bench.py save SRC DST | load PATH")


if __name__ == "__main__":
    main()
