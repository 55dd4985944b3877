"""Reading and tending a being from outside its life: `show`, `verify`, `doctor`, `checkpoint`."""
