"""A trained model in layers plain tf_keras can load safely, for its export.

Some segmentation-models backbones are built with layers a model file cannot carry portably:
  * `Lambda` layers (seresnet*, seresnext*, senet154, resnext*: channel slices and an SE block's
    `expand_dims`), stored as Python bytecode that `load_model` refuses in its default safe mode,
    and that only the Python version that wrote it can read;
  * efficientnet's `FixedDropout`, a class made inside a function of the `efficientnet` package,
    which no loader can find by name ("'str' object is not callable").
The export rebuilds such a model's graph with the same layers (so the same weights, and the
trained ones as they change), except that each Lambda is replaced by the TensorFlow operations its
function applies (tf_keras records those as built-in `TFOpLambda` layers, saved by name) and each
FixedDropout by Keras's own `Dropout` with the same rate and noise shape (the same layer since
Keras fills unknown noise dimensions itself; identity at inference). A model without such layers
is exported as it is.

The rebuilt model must give the trained model's output bit for bit on an image of noise; if it
does not, or cannot be built (a user's Lambda whose function does not run on symbolic tensors),
the model is exported as before and the returned note says how to load it. Cost: one graph walk
and one forward pass per network, once per process (the rebuilt model is kept: it shares the
trained layers, so it always holds the current weights).
"""

from __future__ import annotations

import weakref

import numpy as np

_REBUILT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def portable_model(model):
    """(model to save, note): the model itself when it needs no rebuild, else its rebuilt twin;
    note is None, or why the file written will need `safe_mode=False` or the code it came from."""
    if model not in _REBUILT:  # the value must not hold the model itself, or the key never dies
        _REBUILT[model] = _rebuild_checked(model) if _needs_rebuild(model) else (None, None)
    rebuilt, note = _REBUILT[model]
    return (model if rebuilt is None else rebuilt), note


def _needs_rebuild(model) -> bool:
    import tf_keras as keras

    return any(isinstance(layer, keras.layers.Lambda) or _is_fixed_dropout(layer) for layer in _layers(model))


def _layers(model):
    for layer in model.layers:
        yield layer
        if hasattr(layer, "layers"):  # a model nested in the model
            yield from _layers(layer)


def _is_fixed_dropout(layer) -> bool:
    return type(layer).__name__ == "FixedDropout" and type(layer).__module__.startswith("efficientnet")


def _rebuild_checked(model):
    """Rebuild, then compare the two models on noise; on any failure keep the model."""
    unsafe = "the model file needs tf_keras.models.load_model(path, compile=False, safe_mode=False), or the code that built it"
    try:
        rebuilt = _rebuild(model)
        rng = np.random.default_rng(0)
        noise = [rng.random((1, *x.shape[1:]), dtype=np.float32) for x in model.inputs]
        same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(_flat(model(noise, training=False)), _flat(rebuilt(noise, training=False))))
    except Exception as exc:  # a Lambda whose function cannot run on symbolic tensors
        return None, f"{model.name}: {unsafe} (its Lambda layers could not be rebuilt: {type(exc).__name__}: {exc})"
    if not same:
        return None, f"{model.name}: {unsafe} (without its Lambda layers it computed other values)"
    return rebuilt, None


def _flat(outputs) -> list:
    import tensorflow as tf

    return tf.nest.flatten(outputs)


def _rebuild(model):
    """The model's functional graph called again on new inputs, node by node in the order Keras
    itself runs it (`Functional._run_internal_graph`, whose private bookkeeping this reads:
    tf_keras is Keras 2's frozen line, so the names do not move)."""
    import tensorflow as tf
    import tf_keras as keras

    inputs = [keras.Input(shape=x.shape[1:], dtype=x.dtype, name=x._keras_history.layer.name) for x in model.inputs]
    usage = model._tensor_usage_count
    tensors = {str(id(x)): [y] * usage[str(id(x))] for x, y in zip(model.inputs, inputs)}
    for depth in sorted(model._nodes_by_depth, reverse=True):
        for node in model._nodes_by_depth[depth]:
            if node.is_input or any(t not in tensors for t in node.flat_input_ids):
                continue
            args, kwargs = node.map_arguments(tensors)
            outputs = _call_portably(node.layer, args, kwargs)
            for x_id, y in zip(node.flat_output_ids, tf.nest.flatten(outputs)):
                tensors[x_id] = [y] * usage[x_id]
    outputs = [tensors[str(id(x))].pop() for x in model.outputs]
    return keras.Model(inputs, tf.nest.pack_sequence_as(model._nested_outputs, outputs), name=model.name)


def _call_portably(layer, args, kwargs):
    import tf_keras as keras

    if isinstance(layer, keras.layers.Lambda):
        return layer.function(*args, **(layer.arguments or {}))
    if _is_fixed_dropout(layer):
        return keras.layers.Dropout(layer.rate, noise_shape=layer.noise_shape, seed=layer.seed, name=layer.name)(*args, **kwargs)
    if isinstance(layer, keras.Model) and _needs_rebuild(layer):
        return _rebuild(layer)(*args, **kwargs)
    return layer(*args, **kwargs)
