from .demo_data import (SEG_CLASSES, SEG_PALETTE, SHAPE_CLASSES,
                        generate_demo_data, render_demo_image)

__all__ = [
    'generate_demo_data', 'render_demo_image', 'SHAPE_CLASSES', 'SEG_CLASSES',
    'SEG_PALETTE'
]
