from agent_images.peer.agent import main

main()
