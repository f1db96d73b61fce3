from agent_images.scripted.agent import main

main()
