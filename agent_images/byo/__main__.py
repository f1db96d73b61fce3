from agent_images.byo.agent import main

main()
