"""One cached random case (`validation.random_cases`) simulated and predicted with the shipped factors: the model's
signed relative error on a metric, for the simulation checks that pin a fixed case."""
import analytic
import traces
from validation.random_cases import random_case

__all__ = ["relative_error"]


def relative_error(case, metric) -> float:
    """(predicted - simulated) / simulated of ``metric`` for random case ``case`` = (seed, index)."""
    c = random_case(*case)
    f = analytic.ReuseFactors.load("validation/data/factors.json")
    sim = traces.simulate_layer(c.layer, c.gpu, c.kernel)
    pred = analytic.predict_layer(c.layer, c.gpu, c.kernel, f)
    return (pred[metric] - sim[metric]) / sim[metric]
