#!/bin/bash
# instructions and cycles per request of the dispatcher and of the load generator, 1000 workers (unsaturated)
bench=$1; disp=$2; extra=$3
$bench dispatcher-load --workers ${W:-1000} --seconds 12 --dispatcher-bin $disp $extra > /tmp/insn_run.txt 2>&1 &
sleep 7
P=$(pgrep -f "^$disp " | head -1); G=$(pgrep -f "^$bench dispatcher-load" | head -1)
perf stat -x, -e instructions,cycles,task-clock,syscalls:sys_enter_sendmsg -p $P -- sleep 4 2> /tmp/insn_d.txt &
perf stat -x, -e instructions,cycles,task-clock -p $G -- sleep 4 2> /tmp/insn_g.txt
wait
python3 - <<'PY'
def rd(p):
    d={}
    for l in open(p):
        f=l.strip().split(',')
        if len(f)>3 and f[0] and f[0][0].isdigit(): d[f[2]]=float(f[0])
    return d
d=rd('/tmp/insn_d.txt'); g=rd('/tmp/insn_g.txt')
n=d.get('syscalls:sys_enter_sendmsg',1)
print("requests/s=%d disp_cpu_us/req=%.1f gen_cpu_us/req=%.1f"%(n/4,d.get('task-clock',0)*1000/n,g.get('task-clock',0)*1000/n))
PY
