"""Small segmentation models that build and train in milliseconds: for tests and smoke runs.

Each takes (input_shape, classes, activation, width) and returns a functional tf_keras model that
outputs per-pixel probabilities, the same interface as segmentation-models.
"""

from __future__ import annotations

from .backend import import_keras


def _conv(layers, x, filters, name, strides=1):
    x = layers.Conv2D(filters, 3, strides=strides, padding="same", name=f"{name}_conv")(x)
    x = layers.BatchNormalization(name=f"{name}_bn")(x)
    return layers.Activation("relu", name=f"{name}_relu")(x)


def _head(layers, x, classes, activation):
    x = layers.Conv2D(classes, 1, name="head_conv")(x)
    # float32 output even under mixed precision: losses on float16 probabilities underflow.
    return layers.Activation(activation, dtype="float32", name="head_act")(x)


def tiny_fcn(input_shape, classes, activation, width: int = 8):
    keras = import_keras()
    layers = keras.layers
    inputs = keras.Input(input_shape)
    x = _conv(layers, inputs, width, "c1")
    x = _conv(layers, x, width, "c2")
    return keras.Model(inputs, _head(layers, x, classes, activation), name="tiny_fcn")


def tiny_unet(input_shape, classes, activation, width: int = 8):
    keras = import_keras()
    layers = keras.layers
    inputs = keras.Input(input_shape)
    e1 = _conv(layers, inputs, width, "e1")
    e2 = _conv(layers, layers.MaxPooling2D(name="p1")(e1), width * 2, "e2")
    b = _conv(layers, layers.MaxPooling2D(name="p2")(e2), width * 4, "b")
    d2 = layers.Concatenate(name="cat2")([layers.UpSampling2D(name="u2")(b), e2])
    d2 = _conv(layers, d2, width * 2, "d2")
    d1 = layers.Concatenate(name="cat1")([layers.UpSampling2D(name="u1")(d2), e1])
    d1 = _conv(layers, d1, width, "d1")
    return keras.Model(inputs, _head(layers, d1, classes, activation), name="tiny_unet")


def tiny_deconv(input_shape, classes, activation, width: int = 8):
    """Transpose-convolution decoder: unlike nearest upsampling it compiles with XLA on CPU."""
    keras = import_keras()
    layers = keras.layers
    inputs = keras.Input(input_shape)
    x = _conv(layers, inputs, width, "e1", strides=2)
    x = _conv(layers, x, width * 2, "e2", strides=2)
    x = layers.Conv2DTranspose(width, 3, strides=2, padding="same", name="d2_tconv")(x)
    x = layers.Activation("relu", name="d2_relu")(x)
    x = layers.Conv2DTranspose(width, 3, strides=2, padding="same", name="d1_tconv")(x)
    x = layers.Activation("relu", name="d1_relu")(x)
    return keras.Model(inputs, _head(layers, x, classes, activation), name="tiny_deconv")
