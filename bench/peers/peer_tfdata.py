"""tf.data, in its own idiom for the imagenet-train recipe: decode_and_crop_jpeg with a
sample_distorted_bounding_box (RandomResizedCrop's area 0.08-1, ratio 3/4-4/3),
resize to 224, random flip, normalize (float32) or cast (uint8); batches of 32;
`threads` as its private thread pool and the map's parallelism."""
import common


def recipe(dtype):
    """The imagenet-train recipe in tf.data's idiom: path -> image (uint8 HWC, or float32
    normalized CHW). bench/peers/service.py's tf.data service runs the same."""
    import tensorflow as tf
    mean = tf.constant(common.MEAN, dtype=tf.float32) * 255.0
    std = tf.constant(common.STD, dtype=tf.float32) * 255.0

    def load(path):
        data = tf.io.read_file(path)
        shape = tf.io.extract_jpeg_shape(data)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, tf.zeros([0, 0, 4], tf.float32), area_range=(0.08, 1.0), aspect_ratio_range=(3 / 4, 4 / 3),
            max_attempts=10, use_image_if_no_bounding_boxes=True)
        y, x, _ = tf.unstack(begin)
        h, w, _ = tf.unstack(size)
        image = tf.io.decode_and_crop_jpeg(data, tf.stack([y, x, h, w]), channels=3)
        image = tf.image.resize(image, [224, 224], method="bilinear")
        image = tf.image.random_flip_left_right(image)
        if dtype == "uint8":
            return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
        return tf.transpose((image - mean) / std, [2, 0, 1])

    return load


def main():
    a = common.args()
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    load = recipe(a.dtype)

    ds = tf.data.Dataset.from_tensor_slices(a.paths).shuffle(len(a.paths)).repeat()
    ds = ds.map(load, num_parallel_calls=a.threads, deterministic=False).batch(a.batch_size).prefetch(1)
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = a.threads
    opts.threading.max_intra_op_parallelism = 1
    ds = ds.with_options(opts)
    it = iter(ds)
    common.measure(it, a, lambda b: int(b.shape[0]))


if __name__ == "__main__":
    common.run(main)
