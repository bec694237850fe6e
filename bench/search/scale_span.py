"""Where a scale.sh run's wall time went (KEEP_LOGS=1 keeps its folder): per worker, its GPU work
(as scale.sh counts it) against the time from the submit to its last job done, and when each
shape's first pass ended (the coordinator's log at info).
  python3 bench/search/scale_span.py /tmp/moetune-scale.XXXXXX
"""
import sqlite3, re, datetime, collections, sys
def ts(s): return datetime.datetime.strptime(s[:23], "%Y-%m-%dT%H:%M:%S.%f").timestamp()
D=sys.argv[1]
c=sqlite3.connect(D+'/scale.db')
work=collections.defaultdict(float)
for w,st,med,tu,ns,ph in c.execute("SELECT worker_id,status,median_us,timed_us,samples,phase FROM results WHERE sweep_id=1"):
    tu=tu or 0; work[w]+=tu/1e6
    if st!='pruned' and med:
        raced = tu/med - ns > 1.0
        work[w]+=(10 if ph==2 else 0 if raced else 2)*med/1e6
t_sub=t_done=None; last={}; m2={}; shp=[]
lines=open(D+'/coord.log').read().splitlines()
for line in lines:
    t=ts(line)
    if "'scale' submitted" in line: t_sub=t
    if "'scale' done" in line: t_done=t
    m=re.search(r'job (\d+) \(sweep 1\) leased to (s\d+)',line)
    if m: m2[m.group(1)]=m.group(2)
    m=re.search(r'job (\d+) \(sweep 1\) done',line)
    if m: last[m2[m.group(1)]]=t
    if 'racing over' in line: shp.append(t)
wall=t_done-t_sub
ws=sorted(work); W=[work[w] for w in ws]; L=[last[w]-t_sub for w in ws]
q=lambda v,p: sorted(v)[int(p*(len(v)-1))]
print(f"wall {wall:.2f} ideal {sum(W)/len(W):.2f}; first passes over at " + ", ".join(f"{x-t_sub:.2f}" for x in shp))
print(f"last done per worker: p10 {q(L,.1):.2f} med {q(L,.5):.2f} p90 {q(L,.9):.2f} max {max(L):.2f}")
S=[l-w for l,w in zip(L,W)]
print(f"span - work per worker: p10 {q(S,.1):.2f} med {q(S,.5):.2f} p90 {q(S,.9):.2f}")
