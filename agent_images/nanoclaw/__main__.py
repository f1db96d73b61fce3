from agent_images.nanoclaw.agent import main

main()
