"""A spawn DataLoader whose dataset keeps a lambda deep inside its transform pipeline.

Without mpcompat the error is only ``Can't pickle local object '...<lambda>'``, naming neither
the dataset nor the transform; with mpcompat it carries a note with the path
(``dataset.pipeline.transforms[2]``) and what to do, which ``run()`` reports.
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
    return Compose([float, abs, lambda sample: sample + 1, round])


def run():
    """Iterate a spawn DataLoader with two workers; with mpcompat, return the error's note."""
    import torch.utils.data as data
    from mpcompat.diagnose.notes import explanation_of
    loader = data.DataLoader(PointsDataset(build_pipeline()), batch_size=4, num_workers=2,
                             multiprocessing_context="spawn")
    try:
        return "%d batches from 2 spawn workers" % len(list(loader))
    except Exception as exc:
        report = explanation_of(exc)
        if report is None or not report.problems:
            raise
        problem = report.problems[0]
        return "the %s now names the place, %s (%s): %s." % (
            type(exc).__name__, problem.path, problem.what, (problem.hint or "").split(". ")[0])
