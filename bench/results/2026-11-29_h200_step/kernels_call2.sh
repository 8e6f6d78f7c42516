#!/usr/bin/env bash
# FlashAttention-4 (flash-attn-4 4.0.0b36, nvidia-cutlass-dsl 4.8.1, cu13) on one H200 beside torch's varlen kernel
# and dense cuDNN: its runtime travels as an xz tar of a pip --target tree in two halves (.fa4a/ from
# kernels_call1.sh, .fa4b/ here), then bench/step_time.py attention with every backend, and the 04-27 step profile
# with DOC_ATTN_BACKEND=fa4_varlen.
set -u
stamp() { python3 -u .carry/stamp.py; }
cat /tmp/fa4parts/part_aa .fa4b/part_ab > /tmp/fa4.tar.xz && echo "ee8651a74fe78f34fa70bde60329fe8a288eae1dd98fa3e536440556d8079096  /tmp/fa4.tar.xz" | sha256sum -c || exit 3
mkdir -p /tmp/fa4site && tar -xJf /tmp/fa4.tar.xz -C /tmp/fa4site
python3 -c "import cuda.bindings" 2>/dev/null && rm -rf /tmp/fa4site/cuda /tmp/fa4site/cuda_bindings* /tmp/fa4site/cuda_pathfinder*
python3 -c "import google.protobuf" 2>/dev/null && rm -rf /tmp/fa4site/google /tmp/fa4site/protobuf*
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
python3 -c "import flash_attn.cute.interface as m; print('fa4 import ok', m.__file__)" 2>&1 | tail -3
export RECIPE=2026-04-27 DATA_PATH=.carry/wiki_caseops_small TOKENIZER_PATH=.carry/caseops8192.model
timeout -k 5 240 python3 bench/step_time.py attention --backends fa4_varlen torch_varlen --dense cudnn_attention 2>&1 | stamp > $OUT/attention_fa4.txt
tail -8 $OUT/attention_fa4.txt
DOC_ATTN_BACKEND=fa4_varlen timeout -k 5 ${PROFILE_LIMIT:-300} python3 bench/step_time.py profile --steps 3 --top 45 2>&1 | stamp > $OUT/profile_0427_fa4.txt
grep -E "attention_backend|warmup|step wall|profiled|looping|rror" $OUT/profile_0427_fa4.txt | head -20
