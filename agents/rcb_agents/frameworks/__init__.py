"""Agent frameworks as rcb-env agents: each framework's own agent loop works the episode, with
the environment's tools and budgets, and its model calls recorded through a proxy.

- ``mini-swe-agent`` (:mod:`.minisweagent`): its ``DefaultAgent`` and LiteLLM model, with an
  environment (its ``Environment`` protocol) backed by the episode's sandbox.
- ``openai-agents`` (:mod:`.openai_agents`): the OpenAI Agents SDK, our tools as its function
  tools, its chat-completions model at any OpenAI-compatible endpoint.
- ``smolagents`` (:mod:`.smolagents`): its ``ToolCallingAgent`` with an OpenAI-compatible server
  model.

Each is an optional extra (``rcb-env[mini-swe-agent]``, ``[openai-agents]``, ``[smolagents]``),
imported only when asked for.
"""
