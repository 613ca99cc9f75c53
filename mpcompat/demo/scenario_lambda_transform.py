"""A spawn DataLoader whose dataset keeps a lambda deep inside its transform pipeline.

mmdet3d/mmcv-style datasets hold a ``Compose`` of transforms; one lambda among them and every
spawn DataLoader fails with ``Can't pickle local object '...<lambda>'``, naming neither the
dataset nor the transform. Without mpcompat that is the whole message; with mpcompat the same
error carries a note with the path (``dataset.pipeline.transforms[2]``) and what to do. The
error cannot be fixed for the user, so with mpcompat ``run()`` reports the note it got.
"""
TITLE = "DataLoader(spawn) over a dataset with a lambda deep inside its transform pipeline"
ORDER = 40
NEEDS = ("torch",)
TIMEOUT = 120


class Compose(object):
    """Applies transforms in order, as mmcv's and torchvision's Compose do."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, sample):
        for transform in self.transforms:
            sample = transform(sample)
        return sample


class Scale(object):
    """Multiplies a sample by a factor."""

    def __init__(self, factor):
        self.factor = factor

    def __call__(self, sample):
        return sample * self.factor


class ToTensor(object):
    """Turns a number into a one-element tensor."""

    def __call__(self, sample):
        import torch
        return torch.tensor([float(sample)])


class PointsDataset(object):
    """A map-style dataset that keeps its pipeline, as mmdet3d datasets do."""

    def __init__(self, pipeline, n=8):
        self.pipeline, self.n = pipeline, n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return self.pipeline(index)


def build_pipeline():
    """The pipeline, with a lambda as its third transform (the bug being demonstrated)."""
    return Compose([Scale(2.0), Scale(0.5), lambda sample: sample + 1, ToTensor()])


def summarize(exc):
    """One line from mpcompat's note on ``exc``: where the problem is, and the hint's start."""
    from mpcompat.diagnose.notes import explanation_of
    report = explanation_of(exc)
    if report is None or not report.problems:
        return None
    problem = report.problems[0]
    hint = (problem.hint or "").split(". ")[0]
    return "the %s now names the place, %s (%s): %s." % (
        type(exc).__name__, problem.path, problem.what, hint)


def run():
    """Iterate a spawn DataLoader with two workers; with mpcompat, return the error's note."""
    import torch.utils.data as data
    loader = data.DataLoader(PointsDataset(build_pipeline()), batch_size=4, num_workers=2,
                             multiprocessing_context="spawn")
    try:
        batches = [batch for batch in loader]
    except Exception as exc:
        summary = summarize(exc)
        if summary is None:
            raise
        return summary
    return "%d batches from 2 spawn workers" % len(batches)
