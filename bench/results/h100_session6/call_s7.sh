#!/bin/bash
export DATA_PATH=.carry/wiki TOKENIZER_PATH=.carry/sp1024.model PYTHONUNBUFFERED=1
python3 -c "
import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)
try:
    from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, tma, mbarrier; print('gluon hopper: ok')
except Exception as e: print('gluon hopper:', repr(e))
" 2>&1 | tee $OUT/versions.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv | tee -a $OUT/versions.txt
timeout 540 python3 bench/model_variants.py --variants base floor_no_norm floor_all 2>&1 | grep -v -i warn | tee $OUT/model_variants_floors.txt
