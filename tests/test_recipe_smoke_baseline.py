"""The Swin-T Mask R-CNN baseline recipe end to end: one training iteration
and a test pass with COCO evaluation on the demo data."""
import pytest


@pytest.mark.slow
def test_mask_rcnn_baseline_recipe(run_recipe):
    runner, losses, metrics = run_recipe(
        'configs/baselines/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py')
    assert 'coco/bbox_mAP' in metrics and 'coco/segm_mAP' in metrics
