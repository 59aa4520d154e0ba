def label_for(name: str) -> str:
    return name + 42  # the program's own bug: str + int
