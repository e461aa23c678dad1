"""NVIDIA DALI on the CPU (device_id=None), in its own idiom: readers.file,
decoders.image_random_crop (RandomResizedCrop's area and ratio), resize to 224,
crop_mirror_normalize (random mirror; float32 CHW normalized, or uint8 HWC);
`threads` as the pipeline's num_threads."""
import common


def main():
    a = common.args()
    from nvidia.dali import fn, pipeline_def, types
    import tempfile
    lst = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    for i, p in enumerate(a.paths):
        lst.write("%s %d\n" % (p, i % 8))
    lst.close()

    @pipeline_def(batch_size=a.batch_size, num_threads=a.threads, device_id=None, prefetch_queue_depth=2)
    def train():
        jpegs, labels = fn.readers.file(file_list=lst.name, random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3],
                                               num_attempts=10)
        images = fn.resize(images, resize_x=224, resize_y=224)
        flip = fn.random.coin_flip(probability=0.5)
        if a.dtype == "uint8":
            images = fn.crop_mirror_normalize(images, mirror=flip, dtype=types.UINT8, output_layout="HWC",
                                              mean=[0.0] * 3, std=[1.0] * 3)
        else:
            images = fn.crop_mirror_normalize(images, mirror=flip, dtype=types.FLOAT, output_layout="CHW",
                                              mean=[m * 255 for m in common.MEAN], std=[s * 255 for s in common.STD])
        return images, labels

    pipe = train()
    pipe.build()

    def batches():
        while True:
            out, _ = pipe.run()
            yield out

    common.measure(batches(), a, lambda b: len(b))


common.run(main)
