# Session 10, call 4 (the machine of call 3, still held): softcap_probe.py as committed here, on bcd316b
# (devrun/base) then the working tree with tile-branch.diff.
export PYTHONPATH=.; mkdir -p $OUT/probe2; (cd devrun/base && timeout 80 python ../softcap_probe.py $OUT/probe2/probe.jsonl base > $OUT/probe2/probe.log 2>&1); timeout 80 python devrun/softcap_probe.py $OUT/probe2/probe.jsonl head >> $OUT/probe2/probe.log 2>&1; cat $OUT/probe2/probe.jsonl; nvidia-smi --query-gpu=name --format=csv > $OUT/probe2/gpu.txt
