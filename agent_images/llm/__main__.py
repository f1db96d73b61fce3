from agent_images.llm.agent import main

main()
