"""Drive one bundled episode with your own agent: read, fill the TODO block, submit."""

import gymnasium as gym

import rcb_env  # registers the bundled tasks' ids

env = gym.make("rcb/adamw-warmup.bias_correction-v0", max_steps=10)
obs, info = env.reset(seed=0)
print(obs.splitlines()[0])
# A "policy" that looks at the file, then writes the block it believes in.
obs, *_ = env.step({"tool": "read_file", "path": info["file"], "start_line": 30, "end_line": 45})
body = (
    "        m_hat = self.m / (1 - self.beta1**self.t)\n"
    "        v_hat = self.v / (1 - self.beta2**self.t)\n"
)
env.step(rcb_env.ReplaceInFile(path=info["file"], old=info["todo_block"], new=body))
obs, reward, terminated, truncated, info = env.step({"tool": "submit"})
print(obs)
print("reward", reward, "of weight", info["weight"], "| tests:", info["grade"]["detail"])
env.close()
