"""Small segmentation models that build and train in milliseconds: for tests and smoke runs.

Each takes (input_shape, classes, activation, width) and returns a functional tf_keras model that
outputs per-pixel probabilities, the same interface as segmentation-models.
"""

from __future__ import annotations

from harness.core.backend import import_keras


def _conv(layers, x, filters, name, strides=1, batchnorm=True):
    x = layers.Conv2D(filters, 3, strides=strides, padding="same", name=f"{name}_conv")(x)
    if batchnorm:
        x = layers.BatchNormalization(name=f"{name}_bn")(x)
    return layers.Activation("relu", name=f"{name}_relu")(x)


def _head(layers, x, classes, activation):
    x = layers.Conv2D(classes, 1, name="head_conv")(x)
    # float32 output even under mixed precision: losses on float16 probabilities underflow.
    return layers.Activation(activation, dtype="float32", name="head_act")(x)


def tiny_fcn(input_shape, classes, activation, width: int = 8, batchnorm: bool = True):
    """`batchnorm: false`: no BatchNormalization, so a mirrored step (each replica normalising its
    share of the batch) trains exactly what one device does, up to the order of sums."""
    keras = import_keras()
    layers = keras.layers
    inputs = keras.Input(input_shape)
    x = _conv(layers, inputs, width, "c1", batchnorm=batchnorm)
    x = _conv(layers, x, width, "c2", batchnorm=batchnorm)
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


def pix2pix_generator(input_shape, classes, activation, width: int = 16, depth: int = 3, dropout: float = 0.0):
    """A pix2pix-style U-Net generator: strided convolutions down, transpose convolutions up, skip
    connections. pix2pix adds noise by dropout (0.5) in the innermost decoder block: `dropout`
    sets its rate; it is off by default because its random masks restart after a resume, so a
    resumed run would no longer equal an uninterrupted one bit for bit."""
    keras = import_keras()
    layers = keras.layers
    inputs = keras.Input(input_shape)
    x, skips = inputs, []
    for level in range(depth):
        x = layers.Conv2D(width * 2**level, 4, strides=2, padding="same", name=f"down{level}_conv")(x)
        if level:
            x = layers.BatchNormalization(name=f"down{level}_bn")(x)
        x = layers.LeakyReLU(0.2, name=f"down{level}_act")(x)
        skips.append(x)
    for level in reversed(range(depth - 1)):
        x = layers.Conv2DTranspose(width * 2**level, 4, strides=2, padding="same", name=f"up{level}_tconv")(x)
        x = layers.BatchNormalization(name=f"up{level}_bn")(x)
        if level == depth - 2 and dropout > 0:
            x = layers.Dropout(dropout, name=f"up{level}_drop")(x)
        x = layers.ReLU(name=f"up{level}_act")(x)
        x = layers.Concatenate(name=f"up{level}_cat")([x, skips[level]])
    x = layers.Conv2DTranspose(classes, 4, strides=2, padding="same", name="out_tconv")(x)
    return keras.Model(inputs, layers.Activation(activation, dtype="float32", name="out_act")(x), name="pix2pix_generator")


def patchgan(input_shape, classes, activation=None, width: int = 16, depth: int = 2):
    """A PatchGAN discriminator: image and mask in, one real/fake logit per patch out."""
    keras = import_keras()
    layers = keras.layers
    inputs = keras.Input((*input_shape[:2], input_shape[2] + classes))
    x = inputs
    for level in range(depth):
        x = layers.Conv2D(width * 2**level, 4, strides=2, padding="same", name=f"d{level}_conv")(x)
        if level:
            x = layers.BatchNormalization(name=f"d{level}_bn")(x)
        x = layers.LeakyReLU(0.2, name=f"d{level}_act")(x)
    logits = layers.Conv2D(1, 4, padding="same", name="patch_logits")(x)
    return keras.Model(inputs, layers.Activation("linear", dtype="float32", name="logits")(logits), name="patchgan")


def conv_autoencoder(input_shape, classes, activation, width: int = 16, depth: int = 4):
    """A four-level convolutional autoencoder, scaled by `width`: 3x3 convolution + ReLU +
    2x max-pool blocks down, then 3x3 transpose convolutions up, back to the input's channels."""
    keras = import_keras()
    layers = keras.layers
    inputs = keras.Input(input_shape)
    x = inputs
    for level in range(depth):
        x = layers.Conv2D(min(width * 2**level, 512), 3, padding="same", activation="relu", name=f"c{level}")(x)
        x = layers.MaxPooling2D(name=f"pool{level}")(x)
    for level in reversed(range(depth)):
        x = layers.Conv2DTranspose(min(width * 2**level, 512), 3, strides=2, padding="same", activation="relu", name=f"dc{level}")(x)
    x = layers.Conv2D(classes, 3, padding="same", name="conv_out")(x)
    return keras.Model(inputs, layers.Activation(activation, dtype="float32", name="out_act")(x), name="conv_autoencoder")


def small_autoencoder(input_shape, classes, activation, width: int = 8):
    """Two levels, few filters: the cheap baseline to compare the four-level autoencoder against."""
    return conv_autoencoder(input_shape, classes, activation, width=width, depth=2)
