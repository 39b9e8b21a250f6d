"""Exponential moving averages with the start-up bias removed."""


def debiased_ema(values, decay):
    """Running averages m_t = decay * m_{t-1} + (1 - decay) * x_t, m_0 = 0, each divided by
    1 - decay**t so that early values are not pulled towards zero."""
    # <paper2code name="debiased average">
    running_average = 0.0
    corrected_values = []
    for step_index, value in enumerate(values, start=1):
        running_average = decay * running_average + (1.0 - decay) * value
        corrected_values.append(running_average / (1.0 - decay**step_index))
    return corrected_values
    # </paper2code name="debiased average">
