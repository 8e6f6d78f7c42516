#!/usr/bin/env bash
# Device call 5 (cold machine, the session's last ~300 s of device time): why phase 1's global SGD took 25-35 s at
# world sizes 2 and 4 but 0.1 s at world size 1 (calls 3-4). Side by side: gpu0-1 bench/ttt_phased_gpu.py --nproc 2
# --parts phased on call 1's artifact, each rank printing its warm-up, gather and SGD seconds as they end; gpu2
# bench/ttt_startup_gpu.py (the cost model on this host's cards). Everything in $OUT/all.tgz.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name --format=csv > $OUT/host.txt
CUDA_VISIBLE_DEVICES=2 OMP_NUM_THREADS=16 timeout -k 5 250 python3 bench/ttt_startup_gpu.py --budget 240 \
  --json $OUT/startup.json > $OUT/startup.txt 2>&1 &
CUDA_VISIBLE_DEVICES=0,1 timeout -k 5 265 python3 bench/ttt_phased_gpu.py --nproc 2 --artifact .carry/w4_0427.ptz \
  --parts phased --out $OUT/ttt2 > $OUT/ttt2.txt 2>&1
wait
tar czf /tmp/all.tgz -C $OUT . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
