from starpo_sokoban import main

if __name__ == "__main__":
    main()
