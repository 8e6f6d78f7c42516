#!/bin/bash
export DATA_PATH=.carry/wiki TOKENIZER_PATH=.carry/sp1024.model PYTHONUNBUFFERED=1
timeout 560 python3 bench/model_variants.py --variants base mix_split_16 mix_split_32 no_mix_order base 2>&1 | grep -v -i warn | tee $OUT/model_variants_mix_order.txt
