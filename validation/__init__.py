"""validation: model vs simulation, calibration, reports."""
