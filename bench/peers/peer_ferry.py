"""Ferry in-process (ferry.Loader, local mode): the imagenet-train recipe (float32
NCHW normalized) or its uint8 NHWC form, `threads` decode threads."""
import os
import sys

import common


def main():
    a = common.args()
    sys.path.insert(0, os.path.join(a.build, "python"))
    import tempfile
    import ferry
    tsv = tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False)
    for p in a.paths:
        tsv.write("%s\t0\n" % os.path.abspath(p))
    tsv.close()
    pipeline = "imagenet-train"
    if a.dtype == "uint8":
        pipeline = {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": 224}, {"op": "hflip", "p": 0.5}],
                    "output": {"dtype": "uint8", "layout": "NHWC"}}
    loader = ferry.Loader(data=tsv.name, pipeline=pipeline, batch_size=a.batch_size, epochs=None,
                          threads=a.threads, drop_last=True)
    common.measure(common.forever(lambda: iter(loader)), a, lambda b: b[0].shape[0])


common.run(main)
