from agent_images.openclaw.agent import main

main()
