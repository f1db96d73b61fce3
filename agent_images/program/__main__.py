from agent_images.program.agent import main

main()
