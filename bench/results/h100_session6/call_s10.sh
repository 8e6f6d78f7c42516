#!/bin/bash
export DATA_PATH=.carry/wiki TOKENIZER_PATH=.carry/sp1024.model PYTHONUNBUFFERED=1
timeout 500 python3 bench/model_variants.py --variants base floor_no_token_sums base --profile 45 2>&1 | grep -v -i warn | tee $OUT/model_variants_token_sums.txt
