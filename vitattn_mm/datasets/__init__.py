from .demo_data import (SEG_CLASSES, SEG_PALETTE, SHAPE_CLASSES,
                        generate_demo_data)

__all__ = ['generate_demo_data', 'SHAPE_CLASSES', 'SEG_CLASSES', 'SEG_PALETTE']
