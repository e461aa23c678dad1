"""A trainer for the cross-host tests: reads a Ferry job through ferry.Loader and writes
each epoch's sample indices, as JSON, to --out. The dispatcher comes from --dispatcher,
else $FERRY_DISPATCHER (what ferry-launch hands a trainer). --sleep-ms: time per step."""
import argparse
import json
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--python-dir", required=True)
ap.add_argument("--data", required=True)
ap.add_argument("--job", default="netns")
ap.add_argument("--dispatcher", default=os.environ.get("FERRY_DISPATCHER"))
ap.add_argument("--epochs", type=int, default=1)
ap.add_argument("--batch-size", type=int, default=8)
ap.add_argument("--sleep-ms", type=float, default=0)
ap.add_argument("--out", required=True)
a = ap.parse_args()
if not a.dispatcher:
    sys.exit("trainer: no dispatcher (--dispatcher or $FERRY_DISPATCHER)")
sys.path.insert(0, a.python_dir)
import ferry  # noqa: E402

loader = ferry.Loader(data=a.data, pipeline={"decode": "rgb", "ops": [{"op": "center_crop", "size": 16}],
                                              "output": {"dtype": "uint8", "layout": "NHWC"}},
                      batch_size=a.batch_size, dispatcher=a.dispatcher, job_name=a.job, batches_per_split=2,
                      epochs=a.epochs)
epochs = []
for e in range(a.epochs):
    seen = []
    for _ in loader:
        seen.extend(int(i) for i in loader.last_batch_info()["indices"].tolist() if i >= 0)
        print("step", flush=True)
        if a.sleep_ms:
            time.sleep(a.sleep_ms / 1000)
    epochs.append(seen)
loader.close()
with open(a.out, "w") as f:
    json.dump({"epochs": epochs}, f)
