"""Settings that are each valid but do not go together, found before anything is built or
written: a config error must leave no run directory. Two kinds: combinations (known as the config
is read) and what needs the data's size, durations and a backbone's least side (known at once for
synthetic data, after the scan for real data, still before the run directory is made). And warnings of the same kind
(`comparison_warnings`): too few images, or two seeds, to rank on, which a run says but does not
refuse."""

from __future__ import annotations

from harness.config.catalog import SM_DEFAULT_BACKBONE, input_multiple, min_side, smallest_side
from harness.config.losses import parse_loss
from harness.config.metrics import SPLIT_WORDS, split_column


def combination_problems(config) -> list[str]:
    problems = []
    race, train, placement = config.train.race, config.train, config.placement
    if race is not None and train.early_stopping is not None:
        problems.append(
            "train.race with train.early_stopping: a race already stops the weaker members at its rungs; early "
            "stopping beside it would take members out between rungs, so a rung would rank a different set of "
            "models than the ones it cuts and its rank correlations would compare unlike sets. Use one of them"
        )
    if race is not None and len(config.models) < 2:
        problems.append("train.race with one model: a race keeps the better models of several; with one there is nothing to cut")
    if race is not None and race.metric == "val_loss" and (config.losses_differ() or len({m.predicts_masks for m in config.models}) > 1):
        problems.append(
            "train.race.metric val_loss: the members do not train on one loss (different losses, a GAN's or your kind's "
            "own, an autoencoder's reconstruction), so their val_loss values are not comparable and a rung would cut by "
            "the loss, not the model. Race by val_iou or val_f1"
        )
    unable = [m.name for m in config.models if m.kind not in ("supervised", "autoencoder")]
    if config.data.ignore_label is not None and unable:
        problems.append(
            f"data.ignore_label with {', '.join(unable)}: a GAN and a kind of your own train on the masks as they are "
            "(a GAN's generator's L1 and its discriminator's input), with no way to leave a pixel out. Use the supervised "
            "kind, or fold the ignored value into a class with data.label_map"
        )
    if placement.grouping == "single":
        splitting = [k for k in ("max_members_per_group", "memory_budget_mb", "parallel_groups") if getattr(placement, k) is not None]
        if splitting:
            problems.append(
                f"placement.grouping: single puts every member in one fused step; {', '.join('placement.' + k for k in splitting)} "
                "would split them into groups. Remove one or the other"
            )
    return problems


def loss_problems(config) -> list[str]:
    """A loss that cannot teach the task it is given. `cce` sums -y log p over the classes: with
    data.classes 1 (one sigmoid channel) only the foreground pixels count, and predicting foreground
    everywhere drives it to 0."""
    if config.data.classes != 1:
        return []
    named = [(f"models.{m.name}.loss", m.loss) for m in config.models if m.kind == "supervised" and m.loss]
    named += [("output.compare_loss", config.output.compare_loss)] if config.output.compare_loss else []
    wrong = [where for where, loss in named if "cce" in {name for _, name in parse_loss(loss)}]
    if not wrong:
        return []
    return [f"{', '.join(wrong)}: cce (categorical cross-entropy) needs data.classes 2 or more; with one class (a binary mask, "
            "one sigmoid channel) it counts only the foreground pixels and is 0 for a model that marks every pixel foreground: use bce"]


def sized_problems(config) -> list[str]:
    """Durations beyond the run (a race rung at or after its end, a warm-up as long as the run) and
    images too small for a backbone."""
    problems = []
    total, per_epoch = config.total_steps, config.data.steps_per_epoch
    race = config.train.race
    if race is not None and (late := [e for e, step in zip(race.rungs, race.rung_steps(per_epoch)) if step >= total]):
        problems.append(
            f"train.race.rungs: epoch(s) {late} are at or after the end of the run ({total} steps, "
            f"{total // per_epoch} epoch(s) of {per_epoch} steps): a rung must leave training to save"
        )
    for model in config.models:
        schedule = model.optimizer.schedule if model.optimizer else None
        if schedule is None:
            continue
        warmup = schedule.in_steps(per_epoch, total).warmup_steps
        if warmup >= total:
            problems.append(
                f"models.{model.name}.optimizer.schedule: a warm-up of {warmup} steps is as long as the run ({total} steps): "
                "the learning rate would never reach its peak. Shorten the warm-up or train longer"
            )
    return problems + _too_small(config)


def _too_small(config) -> list[str]:
    """A backbone with a minimum input side (inceptionv3: 75) refused at the config, not at its build."""
    size = config.data.image_size
    problems = []
    for model in config.models:
        least = min_side(model.arch, model.backbone)
        if min(size) < least:
            smallest = smallest_side(input_multiple(model.arch, model.options), least)
            problems.append(
                f"data.image_size: model {model.name!r} ({model.arch} with backbone {model.backbone or SM_DEFAULT_BACKBONE}) "
                f"needs each side to be at least {least} pixels, got {size[0]}x{size[1]}: {smallest}x{smallest} is the smallest it builds with"
            )
    return problems


# Below this many images an interval's image part (a BCa bootstrap over the scored images) covers
# clearly less than it says. Measured (scipy's BCa 95% interval of a mean, 400 samples each, normal
# and beta(2, 5) per-image scores): 84% of the time over 5 images, 89.5% over 10, 91-91.5% over 16,
# 92-94% over 20; over one image there is no interval. harness warns, it does not refuse (a smoke
# test may be tiny).
FEW_SCORED_IMAGES = 10


def few_scored_images(config) -> str | None:
    """A warning when the ranking split holds so few images that its intervals' image part means little."""
    split = split_column(config.ranking_column())[0]
    count = {"test": config.data.test_size, "val": config.data.val_size}.get(split)
    if count is None or count >= FEW_SCORED_IMAGES:
        return None
    images = SPLIT_WORDS[split]
    return (f"the ranking is on {count} {images} image(s): its intervals' image part is a bootstrap over them, which covers "
            f"less than it says with fewer than {FEW_SCORED_IMAGES} (a 95% interval over 5 images: about 84%; over one image "
            f"there is no interval); hold out more {images} images")


def two_seeds(config) -> str | None:
    """A warning for train.repeats 2: one degree of freedom makes the seeds' interval so wide that
    almost nothing is supported, at twice the cost of one seed."""
    if config.train.repeats != 2:
        return None
    return ("train.repeats 2: an interval over two seeds has one degree of freedom (t quantile 12.7, against 4.3 over three "
            "seeds), so for the same seed-to-seed spread it is 3.6 times as wide as three seeds' and a difference is seldom "
            "supported; train.repeats 3 or more")


def comparison_warnings(config) -> list[str]:
    """What weakens the ranking however the run goes, said at its start and among its warnings."""
    return [w for w in (few_scored_images(config), two_seeds(config)) if w]
