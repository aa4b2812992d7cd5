"""The OpenAI Agents SDK (``openai-agents``, a client the project did not write) streams a turn
to completion through a real gateway process on the simulator, over the Responses API."""

from __future__ import annotations

from agents import Agent, OpenAIResponsesModel, RunConfig, Runner

from tests.conformance.httpx_check import checked_async_openai
from tests.gatewayproc import GatewayProcess
from tests.integration.conformance.conftest import MODEL


async def test_an_agent_streams_a_turn_to_its_final_output(gateway: GatewayProcess) -> None:
    client = checked_async_openai(gateway.base_url)
    agent = Agent(
        name="helper",
        instructions="Answer in one sentence.",
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
    )
    config = RunConfig(tracing_disabled=True)
    result = Runner.run_streamed(agent, "What is disaggregated serving?", run_config=config)
    kinds = [event.type async for event in result.stream_events()]
    await client.close()
    assert result.is_complete and isinstance(result.final_output, str) and result.final_output
    assert "raw_response_event" in kinds
    (response,) = result.raw_responses
    assert response.usage.output_tokens == 16  # the simulator's answer, ended by itself
