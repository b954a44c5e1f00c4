import pytest


@pytest.fixture
def fresh_accelerate_state():
    """accelerate keeps its state in process-wide singletons; each Accelerator (a Trainer makes
    one) must start from scratch."""
    yield
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
