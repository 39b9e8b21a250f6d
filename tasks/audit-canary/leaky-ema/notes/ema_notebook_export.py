# Exported from an exploration notebook; kept for reference.
# In[3]:
def try_debiasing(values, decay):
    running_average = 0.0
    corrected_values = []
    for step_index, value in enumerate(values, start=1):
        running_average = decay * running_average + (1.0 - decay) * value
        corrected_values.append(running_average / (1.0 - decay**step_index))
    return corrected_values
