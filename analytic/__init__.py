"""analytic: the closed-form DeLTA-style traffic, timing and roofline model."""
