"""User model factories, named from configs as `factories:<function>` (tests/ is on sys.path)."""

from __future__ import annotations

from harness.core.backend import import_keras, import_tf

tf = import_tf()
keras = import_keras()


class NanAfter(keras.layers.Layer):
    """Passes its input through, until its `n`th training call, from which it outputs NaN."""

    def __init__(self, n: int, **kwargs):
        super().__init__(**kwargs)
        self.n = n

    def build(self, input_shape):
        self.calls = self.add_weight(name="calls", shape=(), dtype=tf.int64, initializer="zeros", trainable=False)

    def call(self, inputs, training=None):
        if training:
            self.calls.assign_add(1)
        poison = tf.where(self.calls >= self.n, tf.constant(float("nan")), tf.constant(0.0))
        return inputs + tf.cast(poison, inputs.dtype)

    def get_config(self):
        return {**super().get_config(), "n": self.n}


def nan_after(input_shape, classes, activation, n: int = 3):
    """A one-conv model whose loss becomes NaN at training step n exactly."""
    inputs = keras.Input(input_shape)
    x = keras.layers.Conv2D(classes, 3, padding="same")(inputs)
    x = NanAfter(n)(x)
    return keras.Model(inputs, keras.layers.Activation(activation)(x))


def small_convnet(input_shape, classes, activation, width: int = 4):
    inputs = keras.Input(input_shape)
    x = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(classes, 1)(x)
    return keras.Model(inputs, keras.layers.Activation(activation)(x))


small_convnet.input_multiple = 2


def logits(input_shape, classes, activation, softmax_classes: int = 0):
    """A model that forgot the activation it was given: logits where probabilities are due (or,
    with softmax_classes, sigmoids where class probabilities should sum to 1)."""
    inputs = keras.Input(input_shape)
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(classes, 1)(x)
    return keras.Model(inputs, keras.layers.Activation("sigmoid")(x) if softmax_classes else x)


def one_channel(input_shape, classes, activation):
    """A model built for grey images whatever the data's channels: its input ignores input_shape."""
    inputs = keras.Input((*input_shape[:2], 1))
    return keras.Model(inputs, keras.layers.Conv2D(classes, 1, activation=activation)(inputs))


def raises_on_build(input_shape, classes, activation):
    """A factory with a bug of its user's: it raises while building."""
    widths = {"narrow": 2}
    return small_convnet(input_shape, classes, activation, width=widths["wide"])


def half_size(input_shape, classes, activation):
    """A model whose output is half the input's height and width: it cannot be scored on masks."""
    inputs = keras.Input(input_shape)
    x = keras.layers.Conv2D(classes, 3, strides=2, padding="same")(inputs)
    return keras.Model(inputs, keras.layers.Activation(activation)(x))


class GuardedIdentity(keras.layers.Layer):
    """A subclassed layer with Python control flow on a tensor in `call` (Keras converts it with
    autograph when the surrounding function has autograph on)."""

    def call(self, inputs):
        if tf.reduce_max(tf.abs(inputs)) > 1e30:
            return tf.zeros_like(inputs)
        return inputs


def guarded_convnet(input_shape, classes, activation):
    inputs = keras.Input(input_shape)
    x = GuardedIdentity()(keras.layers.Conv2D(classes, 3, padding="same")(inputs))
    return keras.Model(inputs, keras.layers.Activation(activation)(x))


class Subclassed(keras.Model):
    """A subclassed model: no variables until it is first called, a Python `if` on a tensor in
    `call`, batch statistics, and optionally an output half the input's size (`stride` 2)."""

    def __init__(self, classes, activation, width, stride):
        super().__init__()
        self.conv = keras.layers.Conv2D(width, 3, strides=stride, padding="same", activation="relu")
        self.norm = keras.layers.BatchNormalization()
        self.head = keras.layers.Conv2D(classes, 1)
        self.activation = keras.layers.Activation(activation)

    def call(self, images, training=False):
        features = self.norm(self.conv(images), training=training)
        if tf.reduce_max(features) > 1e30:
            features = tf.zeros_like(features)
        return self.activation(self.head(features))


def subclassed(input_shape, classes, activation, width: int = 4, stride: int = 1):
    return Subclassed(classes, activation, width, stride)
